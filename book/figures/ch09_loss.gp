# SPDX-License-Identifier: MIT
# figure: ch09 loss
# x: loss_steps
# series: gemm_curve_float32 gemm_curve_bfloat16 gemm_curve_float16
# label-strip: ^gemm_curve_
# xlabel-zh: 训练步
# xlabel-en: training step
# ylabel-zh: 交叉熵损失
# ylabel-en: cross-entropy loss
# caption-zh: 同一个 MLP、同一初始权重和同一批数据，在三种精度下每一步的训练损失：autocast 的两条曲线与 float32 几乎重合。
# caption-en: The training loss of each step of one MLP, from the same initial weights on the same batches, in the three precisions: autocast's two curves lie almost on float32's.
# legend-zh-float32: float32
# legend-en-float32: float32
# legend-zh-bfloat16: bfloat16（autocast）
# legend-en-bfloat16: bfloat16 (autocast)
# legend-zh-float16: float16（autocast + GradScaler）
# legend-en-float16: float16 (autocast + GradScaler)
set key top right
set style data lines
plot for [i=2:nseries+1] datafile using 1:i title columnhead(i) lw 2 dt i-1
