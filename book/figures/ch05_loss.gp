# SPDX-License-Identifier: MIT
# figure: ch05 loss
# x: epoch
# series: loss_curve closed_form_mse
# label-strip: _curve$
# xlabel-zh: 轮（epoch）
# xlabel-en: epoch
# ylabel-zh: 均方误差（对数刻度）
# ylabel-en: mean squared error (log scale)
# caption-zh: 每一轮的平均训练损失（loss），以及闭式解在同一数据上的均方误差（closed_form_mse）：梯度下降训练出的模型最多只能降到这条线，也就是噪声的方差附近。
# caption-en: The mean training loss of each epoch (loss), and the mean squared error of the closed-form solution on the same data (closed_form_mse): the floor that gradient descent can reach, near the noise variance.
set logscale y 10
set key top right
set style data linespoints
set offsets graph 0.02, graph 0.02, 0, 0
set xtics 1
plot for [i=2:nseries+1] datafile using 1:i title columnhead(i) lw 2 pt 7 ps 0.7 dt i-1
