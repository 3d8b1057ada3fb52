# SPDX-License-Identifier: MIT
# figure: ch11 timeline
# x: timeline_start_ms
# series: timeline_end_ms timeline_level timeline_kind timeline_label
# strings: timeline_hot1 timeline_hot2 timeline_hot3
# size: 1000,420
# xlabel-zh: 距这一步开始的时间（毫秒）
# xlabel-en: time from the step's start (ms)
# ylabel-zh: 嵌套深度
# ylabel-en: nesting depth
# caption-zh: 最后一个记录步里主线程上的区间，从导出的跟踪画出。
# caption-en: The main thread's ranges in the last recorded step, drawn from the exported trace.
# legend-zh-timeline_end_ms: 结束时间
# legend-en-timeline_end_ms: end time
# legend-zh-timeline_level: 深度
# legend-en-timeline_level: depth
# legend-zh-timeline_kind: 种类
# legend-en-timeline_kind: kind
# legend-zh-timeline_label: 标注
# legend-en-timeline_label: label
#
# tools/weave writes one row per range (or kernel) of the chapter's trace:
# column 1 its start, 2 its end (ms from the ProfilerStep's start), 3 its
# depth below the step (-1: a kernel on the GPU), 4 its kind (0 the step,
# 1 record_function, 2 module or optimizer, 3 op, 4 kernel), 5 its label (1
# forward, 2 loss, 3 backward, 4 zero_grad, 5 the optimizer's step, 6-8 the
# longest box of the step's three hottest ops, marked ①②③ and named under
# the plot from the strings timeline_hot1..3; 0 none). Each is drawn as a box from start to end at its
# depth, coloured by kind, with its label written on it; the key names only
# the kinds the run has, in the edition's language.
kindcolor(k) = k == 0 ? 0xb0b0b0 : k == 1 ? 0x4c72b0 : k == 2 ? 0x55a868 : k == 3 ? 0xdd8452 : 0xc44e52
set style fill solid 0.85 border lc rgb "#404040"
set key outside top center horizontal samplen 1.5
set ytics 1
set grid noytics
zh = lang eq "zh"
stats datafile using 2 nooutput
span = STATS_max  # the step's end, ms
# how many boxes of each kind: the key lists only the kinds present (an empty title makes no entry)
array nkind[5]
do for [k=0:4] {
  stats datafile using ($4 == k ? 1 : 0) nooutput
  nkind[k + 1] = STATS_sum
}
stats datafile using 3 nooutput
# only the rows that have boxes: a run without kernels has no GPU row
set yrange [STATS_max + 0.6 : STATS_min - 0.6]
set ytics STATS_min, 1, STATS_max
if (STATS_min < 0) { set ytics add ("GPU" -1) }
keytitle(k, zhname, enname) = nkind[k + 1] > 0 ? (zh ? zhname : enname) : ""
hot(i) = i == 1 ? "①" : i == 2 ? "②" : "③"
labelof(c) = c == 1 ? (zh ? "前向" : "forward") : c == 2 ? (zh ? "损失" : "loss") : \
             c == 3 ? (zh ? "反向" : "backward") : c == 4 ? "zero_grad" : \
             c == 5 ? (zh ? "优化器" : "optimizer") : c >= 6 ? hot(int(c) - 5) : ""
haslabels = nseries >= 4
# forward, loss, backward and the optimizer are always named, the hot ops' boxes get ①②③
# (named under the plot); zero_grad only on a box wide enough for it (8 % of the step)
named(c, w) = c == 1 || c == 2 || c == 3 || c == 5 || c >= 6 || (c == 4 && w >= 0.08 * span)
if (haslabels && strlen(timeline_hot1) > 0) {
  set bmargin 5.5
  set label 10 sprintf("%s ① %s   ② %s   ③ %s", zh ? "自身 CPU 时间最多的算子：" : "hottest ops by self CPU time:", \
                       timeline_hot1, timeline_hot2, timeline_hot3) at screen 0.5, screen 0.04 center
}
plot datafile using (($1 + $2) / 2):3:1:2:($3 - 0.4):($3 + 0.4):(kindcolor($4)) with boxxyerror lc rgb variable notitle, \
     datafile using (($1 + $2) / 2):3:(haslabels && named($5, $2 - $1) ? labelof($5) : "") with labels font ",9" notitle, \
     NaN with boxes lc rgb "#b0b0b0" title keytitle(0, "ProfilerStep", "ProfilerStep"), \
     NaN with boxes lc rgb "#4c72b0" title keytitle(1, "record_function 区间", "record_function"), \
     NaN with boxes lc rgb "#55a868" title keytitle(2, "模块、优化器", "module, optimizer"), \
     NaN with boxes lc rgb "#dd8452" title keytitle(3, "算子", "op"), \
     NaN with boxes lc rgb "#c44e52" title keytitle(4, "GPU kernel", "GPU kernel")
