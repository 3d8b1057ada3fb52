# SPDX-License-Identifier: MIT
# figure: ch05 loss
# x: epoch
# series: loss_curve closed_form_mse
# label-strip: _curve$
# xlabel-zh: 轮（epoch）
# xlabel-en: epoch
# ylabel-zh: 均方误差（对数刻度）
# ylabel-en: mean squared error (log scale)
# caption-zh: 每一轮的平均训练损失，以及闭式解在同一数据上的均方误差：梯度下降训练出的模型最多只能降到这条线，也就是噪声的方差附近。
# caption-en: The mean training loss of each epoch, and the mean squared error of the closed-form solution on the same data: the floor that gradient descent can reach, near the noise variance.
# legend-zh-loss: 训练损失
# legend-en-loss: training loss
# legend-zh-closed_form_mse: 闭式解的均方误差
# legend-en-closed_form_mse: closed-form solution's MSE
set logscale y 10
set key top right
set style data linespoints
set offsets graph 0.02, graph 0.02, 0, 0
set xtics 1
plot for [i=2:nseries+1] datafile using 1:i title columnhead(i) lw 2 pt 7 ps 0.7 dt i-1
