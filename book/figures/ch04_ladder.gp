# SPDX-License-Identifier: MIT
# figure: ch04 ladder
# groups: cpu gpu
# x: {g}_sizes
# series-match: ^{g}_\w+_gflops$
# label-strip: ^{g}_|_gflops$
# size: 1000,470
# xlabel-zh: 矩阵大小 n（n×n 乘 n×n）
# xlabel-en: matrix size n (n×n times n×n)
# ylabel-zh: GFLOP/s（对数刻度）
# ylabel-en: GFLOP/s (log scale)
# caption-zh: 矩阵乘法的阶梯：每个版本在各个矩阵大小上达到的 GFLOP/s（2n³ 次浮点运算除以时间）。每一级都在上一级的基础上多利用一层存储结构；这台机器上测得的是哪些设备，就画出哪些设备的阶梯。
# caption-en: The matrix-multiplication ladder: GFLOP/s (2n³ floating-point operations over the time taken) of each version at each size. Each rung uses one more level of the memory hierarchy than the one below it; the panels show the devices this run measured.
# legend-zh-cpu-naive: 1 三重循环，单线程
# legend-en-cpu-naive: 1 triple loop, one thread
# legend-zh-cpu-blocked: 2 分块 + OpenMP
# legend-en-cpu-blocked: 2 blocked + OpenMP
# legend-zh-cpu-mm: 3 OpenBLAS（经 ct_mm）
# legend-en-cpu-mm: 3 OpenBLAS via ct_mm
# legend-zh-cpu-cblas: 3b 直接调用 cblas_sgemm
# legend-en-cpu-cblas: 3b cblas_sgemm called directly
# legend-zh-gpu-naive: 1 朴素
# legend-en-gpu-naive: 1 naive
# legend-zh-gpu-coalesced: 2 合并访存
# legend-en-gpu-coalesced: 2 coalesced
# legend-zh-gpu-smem_tiled: 3 共享内存分块
# legend-en-gpu-smem_tiled: 3 shared-memory tiles
# legend-zh-gpu-reg_tiled: 4 寄存器分块
# legend-en-gpu-reg_tiled: 4 register tiles
# legend-zh-gpu-mm_f32: 5 cuBLAS SGEMM
# legend-en-gpu-mm_f32: 5 cuBLAS SGEMM
# legend-zh-gpu-mm_tf32: 6 cuBLAS TF32
# legend-en-gpu-mm_tf32: 6 cuBLAS TF32
# legend-zh-gpu-mm_bf16: 7 cuBLAS BF16
# legend-en-gpu-mm_bf16: 7 cuBLAS BF16
# legend-zh-gpu-mm_f16: 7 cuBLAS FP16
# legend-en-gpu-mm_f16: 7 cuBLAS FP16
#
# One panel per group present in the metrics: cpu_sizes with every
# cpu_<version>_gflops series, and gpu_sizes with gpu_<version>_gflops where a
# GPU ran. tools/weave sets datafiles[g], groupnames[g], nseriesof[g], ngroups.
set logscale x 2
set logscale y 10
set key below horizontal font ",10" samplen 2
set style data linespoints
set offsets graph 0.03, graph 0.05, 0, 0
if (ngroups > 1) { set multiplot layout 1, ngroups }
do for [g=1:ngroups] {
  set title (groupnames[g] eq "gpu" ? "GPU" : "CPU")
  plot for [i=2:nseriesof[g]+1] datafiles[g] using 1:i:xtic(sprintf("%d", column(1))) \
       title columnhead(i) lw 2 pt 7 ps 0.6
}
