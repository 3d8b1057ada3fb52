# SPDX-License-Identifier: MIT
# figure: ch06 loss
# x: epoch
# series: train_loss test_loss
# xlabel-zh: 轮（epoch）
# xlabel-en: epoch
# ylabel-zh: 交叉熵损失
# ylabel-en: cross-entropy loss
# caption-zh: 每轮的平均训练损失和之后在测试集上的损失。训练损失一直下降；测试损失不再随之下降时，模型开始过拟合。
# caption-en: Each epoch's mean training loss and the test loss measured after it. The training loss keeps falling; once the test loss stops following it, the model has begun to overfit.
# legend-zh-train_loss: 训练损失
# legend-en-train_loss: training loss
# legend-zh-test_loss: 测试损失
# legend-en-test_loss: test loss
#
# tools/weave sets the terminal, the output, the axis labels and `datafile`
# (column 1: the epoch; then one column per series found in the metrics,
# titled by its legend-LANG-LABEL words), `nseries` and `lang`; this script only draws.
set key top right samplen 2
set style data linespoints
set xtics 1
set offsets graph 0.02, graph 0.02, graph 0.05, graph 0.05
plot for [i=2:nseries+1] datafile using 1:i title columnhead(i) lw 2 pt 7 ps 0.8
