# SPDX-License-Identifier: MIT
# figure: ch09 half
# x: half_steps
# series: half_curve_float32 half_curve_autocast half_curve_half
# label-strip: ^half_curve_
# xlabel-zh: 训练步
# xlabel-en: training step
# ylabel-zh: 交叉熵损失（对数刻度）
# ylabel-en: cross-entropy loss (log scale)
# caption-zh: 同一个小 MLP、同一初始权重和同样的 8 个 batch：float32、autocast（float16 + GradScaler）和种子的 model.half() 的训练损失，每过一遍这 8 个 batch 取一次平均。损失变小以后，model.half() 的更新越来越多地被舍入掉，它的曲线停在另外两条上面。
# caption-en: One small MLP, from the same initial weights on the same 8 batches: the training loss in float32, under autocast (float16 + GradScaler) and as the seed's model.half(), averaged over each pass through the 8 batches. Once the loss is small, rounding takes away more and more of model.half()'s updates, and its curve stays above the other two.
# legend-zh-float32: float32
# legend-en-float32: float32
# legend-zh-autocast: autocast float16 + GradScaler
# legend-en-autocast: autocast float16 + GradScaler
# legend-zh-half: model.half()
# legend-en-half: model.half()
set logscale y
set key top right
set style data lines
plot for [i=2:nseries+1] datafile using 1:i title columnhead(i) lw 2 dt i-1
