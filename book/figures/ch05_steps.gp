# SPDX-License-Identifier: MIT
# figure: ch05 steps
# x: first_epoch_step
# series: first_epoch_loss first_epoch_closed_form_mse
# label-strip: ^first_epoch_
# xlabel-zh: 第一轮中的步数（每步一个小批量）
# xlabel-en: step within the first epoch (one mini-batch per step)
# ylabel-zh: 小批量的均方误差（对数刻度）
# ylabel-en: mini-batch mean squared error (log scale)
# caption-zh: 第一轮里每一步的小批量损失：每步把参数与最优值的距离乘上大约 1 − 2η，所以在对数刻度上近似一条直线，直到碰到闭式解的均方误差（虚线）。
# caption-en: The mini-batch loss of each step of the first epoch: each step multiplies the distance to the optimum by about 1 − 2η, so on a log scale it falls along a straight line until it meets the closed form's mean squared error (dashed).
# legend-zh-loss: 训练损失
# legend-en-loss: training loss
# legend-zh-closed_form_mse: 闭式解的均方误差
# legend-en-closed_form_mse: closed-form solution's MSE
set logscale y 10
set key top right
set style data lines
set offsets graph 0.01, graph 0.01, 0, 0
plot for [i=2:nseries+1] datafile using 1:i title columnhead(i) lw 2 dt i-1
