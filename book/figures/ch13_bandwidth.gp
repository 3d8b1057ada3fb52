# SPDX-License-Identifier: MIT
# figure: ch13 bandwidth
# x: sizes
# series: size_fused_gbs size_unfused_gbs size_copy_gbs
# label-strip: ^size_|_gbs$
# xlabel-zh: 元素个数
# xlabel-en: elements
# ylabel-zh: 有效带宽 (GB/s)
# ylabel-en: effective bandwidth (GB/s)
# caption-zh: `gate`（x * sigmoid(y) + alpha * z）融合成一个核函数与逐个运算执行时达到的有效带宽（搬运的字节数 ÷ 时间），以及同样大小的拷贝带宽。融合的核函数搬的字节少，而且每次调用的固定开销只付一次；数据大到放不下缓存以后，它贴近拷贝带宽这条受内存限制时的上限。
# caption-en: Effective bandwidth (bytes moved ÷ time) of `gate` (x * sigmoid(y) + alpha * z) fused into one kernel and run op by op, and the copy bandwidth at the same size. The fused kernel moves fewer bytes and pays the fixed cost of a call once; once the data outgrows the caches it comes close to the copy bandwidth, the ceiling of a memory-bound kernel.
# legend-zh-fused: 融合（一个核函数）
# legend-en-fused: fused (one kernel)
# legend-zh-unfused: 不融合（每个运算符一个核函数）
# legend-en-unfused: unfused (a kernel per operator)
# legend-zh-copy: 拷贝（读一遍、写一遍）
# legend-en-copy: copy (one read, one write)
#
# tools/weave sets the terminal, the output, the axis labels and `datafile`;
# this script only draws.
set logscale x 2
set logscale y 10
set key below horizontal samplen 2
set style data linespoints
set offsets graph 0.03, graph 0.05, 0, 0
elems(x) = x >= 2**20 ? sprintf("%gM", x / 2**20) : x >= 2**10 ? sprintf("%gK", x / 2**10) : sprintf("%g", x)
plot for [i=2:nseries+1] datafile using 1:i:xtic(elems(column(1))) title columnhead(i) lw 2 pt 7 ps 0.6
