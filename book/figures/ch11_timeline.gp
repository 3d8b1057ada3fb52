# SPDX-License-Identifier: MIT
# figure: ch11 timeline
# x: timeline_start_ms
# series: timeline_end_ms timeline_level timeline_kind
# size: 1000,420
# xlabel-zh: 距这一步开始的时间（毫秒）
# xlabel-en: time from the step's start (ms)
# ylabel-zh: 嵌套深度（GPU kernel 在 -1 行）
# ylabel-en: nesting depth (GPU kernels: row -1)
# caption-zh: 最后一个记录步里主线程上的区间，从导出的跟踪画出。
# caption-en: The main thread's ranges in the last recorded step, drawn from the exported trace.
# legend-zh-timeline_end_ms: 结束时间
# legend-en-timeline_end_ms: end time
# legend-zh-timeline_level: 深度
# legend-en-timeline_level: depth
# legend-zh-timeline_kind: 种类
# legend-en-timeline_kind: kind
#
# tools/weave writes one row per range (or kernel) of the chapter's trace:
# column 1 its start, 2 its end (ms from the ProfilerStep's start), 3 its
# depth below the step (-1: a kernel on the GPU), 4 its kind (0 the step,
# 1 record_function, 2 module or optimizer, 3 op, 4 kernel). Each is drawn as
# a box from start to end at its depth, coloured by kind; the key names the
# kinds in the edition's language.
kindcolor(k) = k == 0 ? 0xb0b0b0 : k == 1 ? 0x4c72b0 : k == 2 ? 0x55a868 : k == 3 ? 0xdd8452 : 0xc44e52
set style fill solid 0.85 border lc rgb "#404040"
set key outside top center horizontal samplen 1.5
set ytics 1
set yrange [*:*] reverse
set offsets 0, 0, 0.6, 0.6
set grid noytics
zh = lang eq "zh"
plot datafile using (($1 + $2) / 2):3:1:2:($3 - 0.4):($3 + 0.4):(kindcolor($4)) with boxxyerror lc rgb variable notitle, \
     NaN with boxes lc rgb "#b0b0b0" title (zh ? "ProfilerStep" : "ProfilerStep"), \
     NaN with boxes lc rgb "#4c72b0" title (zh ? "record_function 区间" : "record_function"), \
     NaN with boxes lc rgb "#55a868" title (zh ? "模块、优化器" : "module, optimizer"), \
     NaN with boxes lc rgb "#dd8452" title (zh ? "算子" : "op"), \
     NaN with boxes lc rgb "#c44e52" title (zh ? "GPU kernel" : "GPU kernel")
