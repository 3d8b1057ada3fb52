# SPDX-License-Identifier: MIT
# figure: ch06 accuracy
# x: epoch
# series: test_acc
# xlabel-zh: 轮（epoch）
# xlabel-en: epoch
# ylabel-zh: 测试准确率
# ylabel-en: test accuracy
# caption-zh: 每轮之后的测试准确率。虚线是本章的目标：MLP 0.88，CNN 0.91（Fashion-MNIST 基准表中同类模型的水平）。
# caption-en: Test accuracy after each epoch. The dashed lines are this chapter's targets: 0.88 for the MLP, 0.91 for the CNN (the level of such models in Fashion-MNIST's benchmark table).
# legend-zh-test_acc: 测试集准确率
# legend-en-test_acc: test accuracy
#
# tools/weave sets the terminal, the output, the axis labels and `datafile`
# (column 1: the epoch; column 2: test_acc), `nseries` and `lang`.
set key bottom right samplen 2
set style data linespoints
set xtics 1
set offsets graph 0.02, graph 0.02, graph 0.05, graph 0.05
mlp = (lang eq "zh") ? "MLP 目标 0.88" : "MLP target 0.88"
cnn = (lang eq "zh") ? "CNN 目标 0.91" : "CNN target 0.91"
plot for [i=2:nseries+1] datafile using 1:i title columnhead(i) lw 2 pt 7 ps 0.8, \
     0.88 title (lang eq "zh" ? "MLP 的目标 0.88" : "MLP target 0.88") dt 2 lc rgb "#888888", \
     0.91 title (lang eq "zh" ? "CNN 的目标 0.91" : "CNN target 0.91") dt 3 lc rgb "#444444"
