# SPDX-License-Identifier: MIT
# figure: ch02 bandwidth
# x: sizes_bytes
# series: h2d_pageable_gbs h2d_pinned_gbs d2h_pageable_gbs d2h_pinned_gbs host_memcpy_gbs host_copy_gbs
# label-strip: _gbs$
# xlabel-zh: 每次拷贝的字节数
# xlabel-en: bytes per copy
# ylabel-zh: 带宽 (GB/s)
# ylabel-en: bandwidth (GB/s)
# caption-zh: 不同大小的拷贝达到的带宽：主机与设备之间（可分页内存与锁页内存），以及主机内存之内的拷贝。小拷贝被每次调用的固定开销拖慢，大拷贝才接近链路或内存的上限。
# caption-en: Bandwidth reached by copies of each size: between host and device (pageable and pinned host memory) and within host memory. Small copies are held back by the fixed cost of each call; only large ones come near the link's or the memory's limit.
# legend-zh-h2d_pageable: 主机→设备，可分页内存
# legend-en-h2d_pageable: host→device, pageable memory
# legend-zh-h2d_pinned: 主机→设备，锁页内存
# legend-en-h2d_pinned: host→device, pinned memory
# legend-zh-d2h_pageable: 设备→主机，可分页内存
# legend-en-d2h_pageable: device→host, pageable memory
# legend-zh-d2h_pinned: 设备→主机，锁页内存
# legend-en-d2h_pinned: device→host, pinned memory
# legend-zh-host_memcpy: 主机内存内的 memcpy
# legend-en-host_memcpy: memcpy within host memory
# legend-zh-host_copy: 主机内存内的张量拷贝
# legend-en-host_copy: tensor copy within host memory
#
# tools/weave sets the terminal, the output, the axis labels and `datafile`
# (column 1: x; then one column per series found in the metrics, titled by its
# legend-LANG-LABEL words), `nseries` and `lang`; this script only draws.
set logscale x 2
set logscale y 10
set key below horizontal samplen 2
set style data linespoints
set offsets graph 0.03, graph 0.05, 0, 0
# tick labels at the measured sizes, in binary units
bytes(x) = x >= 2**30 ? sprintf("%g GiB", x / 2**30) : x >= 2**20 ? sprintf("%g MiB", x / 2**20) : \
           x >= 2**10 ? sprintf("%g KiB", x / 2**10) : sprintf("%g B", x)
plot for [i=2:nseries+1] datafile using 1:i:xtic(bytes(column(1))) title columnhead(i) lw 2 pt 7 ps 0.6
