# SPDX-License-Identifier: MIT
# figure: ch09 scale
# x: scale_steps
# series: scale_values
# xlabel-zh: 训练步
# xlabel-en: training step
# ylabel-zh: GradScaler 的倍数（对数刻度）
# ylabel-en: GradScaler's scale (log scale)
# caption-zh: GradScaler 的倍数：从 2^16 开始，埋下的 NaN/inf 让它减半并跳过那一步，连续 10 步干净就加倍。
# caption-en: The GradScaler's scale: from 2^16, each planted NaN/inf halves it and skips that step, and 10 clean steps in a row double it.
# legend-zh-scale_values: 倍数
# legend-en-scale_values: scale
set logscale y 2
set key bottom right
set style data steps
plot for [i=2:nseries+1] datafile using 1:i title columnhead(i) lw 2
