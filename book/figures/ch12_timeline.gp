# SPDX-License-Identifier: MIT
# figure: ch12 timeline
# groups: serial two_stream
# x: {g}_chunk
# series-match: ^{g}_(copy|compute)_(start|end)_ms$
# label-strip: ^{g}_|_ms$
# size: 1000,760
# xlabel-zh: 从 t0 事件起的时间（毫秒），由各流上记录的事件测得
# xlabel-en: time since the t0 event (ms), from the events recorded on the streams
# caption-zh: 流水线的时间线：每一块数据的拷贝（上）和计算（下）从开始到结束的时刻，都是事件在流上记下的时间。上图一个流，拷贝和计算轮流进行；下图两个流，第 i+1 块的拷贝和第 i 块的计算在 GPU 上同时进行。在 CPU 上两图一样，因为 CPU 的工作在发起时就做完了。
# caption-en: The pipeline's timeline: when each chunk's copy (top row) and compute (bottom row) began and ended, as the events recorded on the streams measured it. Top panel, one stream: copies and compute take turns. Bottom panel, two streams: on a GPU, chunk i+1's copy runs while chunk i is computed. On the CPU both panels look alike, since CPU work is done when it is issued.
# legend-zh-copy_start: 拷贝
# legend-en-copy_start: copy to the device
# legend-zh-copy_end: 拷贝结束
# legend-en-copy_end: copy ends
# legend-zh-compute_start: 计算
# legend-en-compute_start: compute
# legend-zh-compute_end: 计算结束
# legend-en-compute_end: compute ends
#
# Columns of each group's data: chunk, copy start, copy end, compute start,
# compute end (ms). Each chunk is a bar on the copy row (y = 1) and one on
# the compute row (y = 0); both panels share the x range.
xmax = 0
do for [g=1:ngroups] {
  stats datafiles[g] using 3 nooutput
  if (STATS_max > xmax) { xmax = STATS_max }
  stats datafiles[g] using 5 nooutput
  if (STATS_max > xmax) { xmax = STATS_max }
}
set xrange [0:xmax * 1.02]
set yrange [-0.7:1.7]
copyname = (lang eq "zh") ? "拷贝" : "copy"
compname = (lang eq "zh") ? "计算" : "compute"
set ytics (copyname 1, compname 0)
set style fill solid 0.65 border lc rgb "#303030"
set key below horizontal font ",10" samplen 2
if (ngroups > 1) { set multiplot layout ngroups, 1 }
do for [g=1:ngroups] {
  set title (groupnames[g] eq "serial" ? ((lang eq "zh") ? "串行：一个流" : "serial: one stream") \
                                       : ((lang eq "zh") ? "流水线：两个流" : "pipeline: two streams"))
  plot datafiles[g] using (($2+$3)/2):(1):(($3-$2)/2):(0.3) with boxxyerror lc rgb "#4477aa" title columnhead(2), \
       datafiles[g] using (($4+$5)/2):(0):(($5-$4)/2):(0.3) with boxxyerror lc rgb "#ee6677" title columnhead(4)
}
