# SPDX-License-Identifier: MIT
# figure: ch14 loss
# x: eval_steps
# series: train_loss val_loss
# xlabel-zh: 训练步数
# xlabel-en: training step
# ylabel-zh: 交叉熵损失（每个字符，nat）
# ylabel-en: cross-entropy loss (nats per character)
# caption-zh: 各评估点在训练集和验证集上估计的损失（固定的 batch）。第 0 步约为 ln V（均匀猜测）；两条线分开时，模型开始背语料。
# caption-en: The loss estimated on the training and validation splits at each eval point (fixed batches). Step 0 sits near ln V, the uniform guess; where the two lines part, the model has begun to memorize the corpus.
# legend-zh-train_loss: 训练集
# legend-en-train_loss: train split
# legend-zh-val_loss: 验证集
# legend-en-val_loss: validation split
#
# tools/weave sets the terminal, the output, the axis labels and `datafile`
# (column 1: the step; then one column per series), `nseries` and `lang`;
# this script only draws.
set key top right samplen 2
set style data linespoints
set offsets graph 0.02, graph 0.02, graph 0.05, graph 0.05
plot for [i=2:nseries+1] datafile using 1:i title columnhead(i) lw 2 pt 7 ps 0.8
