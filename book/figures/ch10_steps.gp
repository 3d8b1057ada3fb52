# SPDX-License-Identifier: MIT
# figure: ch10 steps
# x: timing_widths
# series: eager_ms replay_ms
# label-strip: _ms$
# xlabel-zh: 隐藏层宽度（批大小固定）
# xlabel-en: hidden width (fixed batch size)
# ylabel-zh: 每步时间 (ms)
# ylabel-en: time per step (ms)
# caption-zh: 同一个训练步逐个调用（eager）与整图重放（replay）的每步时间，宽度从每个核函数都很小（启动与分派开销为主）到计算为主。两条线在左端分开，重放省下的是每个调用在主机上的开销；越往右，计算占的时间越多，两条线越靠近。
# caption-en: Time per step of one training step run op by op (eager) and as a replayed graph (replay), from widths where every kernel is tiny (launch and dispatch overhead dominate) to widths where the arithmetic dominates. The lines part at the left, where replay saves each call's host-side cost, and come closer towards the right, where the computation takes more of the time.
# legend-zh-eager: 逐个调用（eager）
# legend-en-eager: eager, op by op
# legend-zh-replay: 重放
# legend-en-replay: graph replay
#
# tools/weave sets the terminal, the output, the axis labels and `datafile`
# (column 1: the widths; then one column per series), `nseries` and `lang`.
set logscale x 2
set logscale y 10
set key top left samplen 2
set style data linespoints
set offsets graph 0.03, graph 0.05, 0, 0
plot for [i=2:nseries+1] datafile using 1:i:xtic(sprintf("%d", column(1))) title columnhead(i) lw 2 pt 7 ps 0.6
