// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 14 章　一个小 GPT：用 C 训练字符级语言模型

前面十三章各讲一件事：设备、张量搬运、缓存分配器、矩阵乘法、训练循环、数据并行、DDP、混合精度、CUDA Graphs、性能分析、流、运行时编译。本章把它们用在同一个模型上：一个字符级的 GPT，结构和 nanoGPT 一样（词嵌入 `wte`、位置嵌入 `wpe`、若干个 pre-norm 的 Transformer 块、最后的 LayerNorm `ln_f`，输出层 `lm_head` 和 `wte` 共享权重），在 Debian 自带的文本上从零训练，然后让它写字。

中文版用 `fortunes-zh` 里的唐诗三百首和宋词一百首，英文版用 `fortunes` 里的名言和短文。两份语料都不大：模型学到的是字形和格律的样子，不是意思。但训练几分钟之后生成的文本已经明显不是随机字符了：五言七言的句子长度、逗号和句号的位置、"作者："这样的行，都会出现。

### 用这个程序的话说，GPT 是什么

GPT 是一个函数：给它 T 个 token（这里一个 token 就是一个字符的编号），它返回 T 行、每行 V 个分数（logits，V 是字符表的大小）；第 t 行是在看过第 0 到第 t 个字符之后，对第 t+1 个字符的打分。在程序里，这个函数就是 `gpt_forward(g, idx)`：输入 (B, T) 的整数，输出 (B, T, V) 的 logits。

- **训练**就是调整参数，让每一行的 softmax 给真正的下一个字符尽量高的概率：损失是交叉熵，也就是"正确答案的概率取负对数"的平均。一个什么也没学的模型对 V 个字符一视同仁，损失是 ln V；降到 ln V 以下多少，就是学到了多少。
- **生成**就是把模型自己的输出喂回去：取最后一行的分数，抽一个字符接在后面，再算一次（`generate`）。
- "因果"（causal）是说第 t 行只能看到第 t 个字符和它之前的字符，所以一次前向就同时训练了 T 个"预测下一个字符"的题目，而生成时的每一步和训练时看到的情形完全一样。

其余的一切（AdamW、学习率表、梯度裁剪、检查点、多进程、混合精度、CUDA Graphs、性能分析）都是前面各章已经造好的训练机器。本章的最后一节列出它们各自对应的开关。

种子教程（本书据以重写的五篇中文教程，见[术语表](glossary:seed-tutorials)）五篇都没有讲 Transformer 或语言模型，所以本章没有需要纠正的说法；它们的混合精度示例在裁剪之前先 `unscale_`，正是本章 `update` 的顺序。

```sh
cd build && ninja ch14_gpt
./ch14                          # 英文语料，默认的 CPU 规模，几分钟
./ch14 --corpus zh              # 唐诗宋词
./ch14 --corpus my.txt          # 任何 UTF-8 文本
./ch14 --save gpt.safetensors   # 训练完存检查点
./ch14 --generate gpt.safetensors --prompt "白日" --sample-len 200
./ch14 --quick                  # 2 层、几十步：几秒钟
```
:::
::: en
# Chapter 14. A small GPT: training a character-level language model in C

The thirteen chapters before this one each taught one thing: devices, moving tensors, the caching allocator, matrix products, training loops, data parallelism, DDP, mixed precision, CUDA graphs, profiling, streams, runtime compilation. This chapter puts them to work on one model: a character-level GPT shaped like nanoGPT (a token embedding `wte`, a position embedding `wpe`, a stack of pre-norm transformer blocks, a final LayerNorm `ln_f`, and an output layer `lm_head` that shares its weight with `wte`), trained from scratch on text that ships with Debian, and then asked to write.

The Chinese edition trains on the Tang poems and Song lyrics of `fortunes-zh`, the English edition on the quotations and short prose of `fortunes`. Both corpora are small: the model learns what the text looks like, not what it means. Still, after a few minutes of training its samples are visibly not random characters: line lengths, where the commas and full stops go, lines such as "-- Mark Twain" appear.

### What a GPT is, in this program's terms

A GPT is a function: given T tokens (here a token is a character's number), it returns T rows of V scores (logits; V is the size of the vocabulary); row t scores each candidate for character t+1, having seen characters 0 to t. In the program that function is `gpt_forward(g, idx)`: (B, T) integers in, (B, T, V) logits out.

- **Training** adjusts the parameters so that each row's softmax gives the actual next character as much probability as it can: the loss is the cross-entropy, the mean of the negative log of the right answer's probability. A model that has learned nothing treats all V characters alike and scores ln V; how far below ln V the loss gets is how much it has learned.
- **Generation** feeds the model its own output: take the last row's scores, draw a character, append it, compute again (`generate`).
- "Causal" means row t sees only character t and those before it, so one forward pass trains T next-character questions at once, and each step of generation is exactly the situation training saw.

Everything else (AdamW, the learning-rate schedule, gradient clipping, checkpoints, several processes, mixed precision, CUDA graphs, profiling) is training machinery the earlier chapters built. The last section lists the flag each one became here.

The seed tutorials (the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials)) do not cover transformers or language models, so this chapter has none of their claims to correct; their mixed-precision example does `unscale_` before clipping, which is the order of this chapter's `update`.

```sh
cd build && ninja ch14_gpt
./ch14                          # the English corpus, the default CPU size: minutes
./ch14 --corpus zh              # Tang and Song poems
./ch14 --corpus my.txt          # any UTF-8 text
./ch14 --save gpt.safetensors   # keep a checkpoint of the trained model
./ch14 --generate gpt.safetensors --prompt "The " --sample-len 200
./ch14 --quick                  # 2 layers, tens of steps: seconds
```
:::
*/

/*md hide*/
#define _POSIX_C_SOURCE 200809L // clock_gettime, getpid

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct.h"

#define STEP_LOSSES 50      // per-step losses kept for the twin comparison
#define MAX_EVALS 256       // eval points a run may have
#define FORTUNES_DIR "/usr/share/games/fortunes"
// Philox stream tags: each use of the generator draws from its own stream.
#define TAG_TRAIN 1u
#define TAG_EVAL_TRAIN 2u
#define TAG_EVAL_VAL 3u
#define TAG_SAMPLE 4u

// The chapter's settings, from its flags (0 or NULL: the preset's value).
typedef struct settings {
  const char *corpus, *preset, *amp, *save, *resume, *generate, *save_init, *profile, *prompt;
  long n_layer, n_head, n_embd, block_size, batch_size, max_iters, warmup_iters, eval_interval, eval_iters,
      log_interval, sample_len, top_k, init_steps;
  double lr, min_lr, weight_decay, beta2, grad_clip, temperature;
  bool graphs;
  uint64_t seed; // --seed
} settings;
/*md show*/

/*md
::: zh
## 数据：语料、字符表和随机窗口

`--corpus zh` 读 `/usr/share/games/fortunes/` 下的 `tang300` 和 `song100`（Debian 的 `fortunes-zh` 软件包，UTF-8 编码），`--corpus en` 读 `fortunes` 软件包里几个以名言和短文为主的文件，`--corpus FILE` 读任何 UTF-8 文本。fortune 文件用单独一行 `%` 分隔条目，`fortunes-zh` 还在标题和作者行里夹了终端的颜色转义序列（`ESC[32m` 之类），英文文件里偶尔有用退格键叠印的下划线；`clean_fortunes` 把这些都去掉，条目之间留一个空行。环境变量 `CT_FORTUNES_DIR` 可以指向别的目录。

字符表（vocabulary）就是语料里出现过的所有 Unicode 码点，从小到大排好；一个字符的编号（token）就是它在表里的位置。这和 nanoGPT 的 `shakespeare_char` 一样：`chars = sorted(set(text))`。英文语料的表不到一百个字符，中文的有两千多个。字符表存进检查点的元数据里，`--generate` 不需要语料也能把编号变回文字。

前 90% 的 token 用来训练，后 10% 用来验证。每一步训练取 B 个长度为 T 的窗口：从训练部分随机选一个起点 i，输入是 `data[i : i+T]`，目标是往后错一位的 `data[i+1 : i+T+1]`。起点来自带种子的 Philox 生成器，但用的是它"计数器"的一面：第 s 步第 r 行的起点是 `philox((s, r, 0, tag), seed)` 的函数，不依赖前面抽过多少个数。所以续训（`--resume`）时第 s 步抽到的窗口和不中断的训练完全相同，不需要保存生成器的状态；W 个进程、每个 B 行时，第 k 个进程取第 kB 到 kB + B − 1 行，合起来正是一个进程取 W·B 行时的那些窗口。
:::
::: en
## Data: the corpus, the vocabulary and random windows

`--corpus zh` reads `tang300` and `song100` under `/usr/share/games/fortunes/` (Debian's `fortunes-zh` package, UTF-8), `--corpus en` a few files of the `fortunes` package that hold mostly quotations and short prose, and `--corpus FILE` any UTF-8 text. Fortune files separate their entries with a line holding only `%`; `fortunes-zh` also puts terminal colour escapes (`ESC[32m` and the like) into its title and author lines, and the English files now and then underline a word by overstriking it with backspaces. `clean_fortunes` removes all of that and leaves a blank line between entries. The environment variable `CT_FORTUNES_DIR` points elsewhere.

The vocabulary is every Unicode code point that occurs in the corpus, sorted; a character's number (its token) is its position in that list. This is nanoGPT's `shakespeare_char`: `chars = sorted(set(text))`. The English corpus has fewer than a hundred characters, the Chinese one over two thousand. The vocabulary is saved in the checkpoint's metadata, so `--generate` turns numbers back into text without the corpus.

The first 90% of the tokens are for training, the last 10% for validation. Each training step takes B windows of length T: a random start i in the training part, the input `data[i : i+T]` and the target one position later, `data[i+1 : i+T+1]`. The starts come from the seeded Philox generator, used as what it is, a counter-based function: the start of row r of step s is a function of `philox((s, r, 0, tag), seed)`, independent of how many numbers were drawn before. So a resumed run (`--resume`) draws at step s exactly the windows the uninterrupted run drew, with no generator state to save; and with W processes of B rows each, process k takes rows kB to kB + B − 1, the windows that one process with W·B rows would take.
:::
*/
// A growing byte buffer.
typedef struct bytes {
  char *p;
  size_t n, cap;
} bytes;

static int bytes_put(bytes *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return ct_fail(CT_ERR_OOM, "ch14: out of host memory (%zu bytes of text)", cap);
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
  return CT_OK;
}

// Appends the whole file at `path` to b.
static int read_file(const char *path, bytes *b) {
  errno = 0;
  FILE *f = ct_open_input("--corpus", path, "give zh, en or the path of a UTF-8 text file");
  if (!f && errno && errno != EISDIR)
    return ct_fail(CT_ERR_IO, "--corpus: %s: cannot open: %s (give zh, en or the path of a UTF-8 text file)", path,
                   strerror(errno));
  if (!f) return CT_ERR_IO;
  char buf[65536];
  size_t n;
  int rc = CT_OK;
  while (rc == CT_OK && (n = fread(buf, 1, sizeof buf, f)) > 0) rc = bytes_put(b, buf, n);
  if (rc == CT_OK && ferror(f)) rc = ct_fail(CT_ERR_IO, "ch14: error reading %s", path);
  fclose(f);
  return rc;
}

// A fortune file's text as plain lines: ANSI colour escapes (ESC [ ... m)
// dropped, a backspace erases the character before it (overstrike: "_\bA"
// prints A), each "%" separator line becomes an empty line.
static int clean_fortunes(const bytes *in, bytes *out) {
  size_t line_start = out->n;
  for (size_t i = 0; i < in->n; ++i) {
    char c = in->p[i];
    int rc = CT_OK;
    if (c == '\x1b' && i + 1 < in->n && in->p[i + 1] == '[') { // ESC [ params letter
      i += 2;
      while (i < in->n && !((in->p[i] >= 'A' && in->p[i] <= 'Z') || (in->p[i] >= 'a' && in->p[i] <= 'z'))) i++;
    } else if (c == '\b') {
      if (out->n > line_start) out->n--;
      while (out->n > line_start && ((unsigned char)out->p[out->n] & 0xC0) == 0x80) out->n--; // whole UTF-8 char
    } else if (c == '\n') {
      bool sep = out->n == line_start + 1 && out->p[line_start] == '%';
      if (sep) out->n = line_start; // "%" line -> empty line
      rc = bytes_put(out, "\n", 1);
      line_start = out->n;
    } else if ((unsigned char)c >= 0x20 || c == '\t') {
      rc = bytes_put(out, &c, 1);
    }
    if (rc != CT_OK) return rc;
  }
  return CT_OK;
}

// The files of each built-in corpus, under $CT_FORTUNES_DIR or FORTUNES_DIR.
static const char *const ZH_FILES[] = {"tang300", "song100", NULL};
static const char *const EN_FILES[] = {"wisdom", "literature", "humorists", "people", "science",
                                       "platitudes", "love", "education", NULL};

static int load_corpus(const char *spec, bytes *text) {
  bool zh = strcmp(spec, "zh") == 0, en = strcmp(spec, "en") == 0;
  if (!zh && !en) return read_file(spec, text); // any UTF-8 file, as it is
  const char *dir = getenv("CT_FORTUNES_DIR") ? getenv("CT_FORTUNES_DIR") : FORTUNES_DIR;
  for (const char *const *f = zh ? ZH_FILES : EN_FILES; *f; ++f) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, *f);
    bytes raw = {0};
    int rc = read_file(path, &raw);
    if (rc == CT_OK) rc = clean_fortunes(&raw, text);
    free(raw.p);
    if (rc != CT_OK) {
      if (rc == CT_ERR_IO)
        ct_fail(CT_ERR_IO, "ch14: --corpus %s needs %s (Debian's %s package: apt-get install %s, or point "
                "CT_FORTUNES_DIR at a folder holding it)", spec, path, zh ? "fortunes-zh" : "fortunes",
                zh ? "fortunes-zh" : "fortunes");
      return rc;
    }
  }
  return CT_OK;
}

// UTF-8 to code points. Fails naming the byte offset of a malformed sequence.
static int utf8_decode(const char *what, const bytes *b, uint32_t **out, int64_t *n_out) {
  uint32_t *cp = malloc((b->n + 1) * sizeof *cp);
  if (!cp) return ct_fail(CT_ERR_OOM, "ch14: out of host memory");
  int64_t n = 0;
  const unsigned char *s = (const unsigned char *)b->p;
  for (size_t i = 0; i < b->n;) {
    unsigned c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    bool ok = len > 0 && i + (size_t)len <= b->n;
    for (int k = 1; ok && k < len; ++k) {
      ok = (s[i + k] & 0xC0) == 0x80;
      v = (v << 6) | (s[i + k] & 0x3F);
    }
    static const uint32_t min_of_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (!ok || v < min_of_len[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
      free(cp);
      return ct_fail(CT_ERR_VALUE, "ch14: %s is not UTF-8 text (a malformed sequence at byte %zu); convert it "
                     "first, e.g. iconv -f LATIN1 -t UTF-8", what, i);
    }
    cp[n++] = v;
    i += (size_t)len;
  }
  *out = cp, *n_out = n;
  return CT_OK;
}

// One code point as UTF-8 into buf (at least 4 bytes); returns its length.
static int utf8_encode(uint32_t v, char *buf) {
  if (v < 0x80) return buf[0] = (char)v, 1;
  if (v < 0x800) return buf[0] = (char)(0xC0 | v >> 6), buf[1] = (char)(0x80 | (v & 0x3F)), 2;
  if (v < 0x10000)
    return buf[0] = (char)(0xE0 | v >> 12), buf[1] = (char)(0x80 | ((v >> 6) & 0x3F)),
           buf[2] = (char)(0x80 | (v & 0x3F)), 3;
  buf[0] = (char)(0xF0 | v >> 18), buf[1] = (char)(0x80 | ((v >> 12) & 0x3F));
  buf[2] = (char)(0x80 | ((v >> 6) & 0x3F)), buf[3] = (char)(0x80 | (v & 0x3F));
  return 4;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

// The vocabulary: the distinct code points, sorted (chars = sorted(set(text))).
typedef struct vocab {
  uint32_t *chars;
  int64_t size;
} vocab;

static int vocab_build(const uint32_t *cp, int64_t n, vocab *v) {
  uint32_t *s = malloc((size_t)(n ? n : 1) * sizeof *s);
  if (!s) return ct_fail(CT_ERR_OOM, "ch14: out of host memory");
  memcpy(s, cp, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_u32);
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i)
    if (i == 0 || s[i] != s[k - 1]) s[k++] = s[i];
  v->chars = s, v->size = k;
  return CT_OK;
}

// stoi: a code point's token, or -1 when it is not in the vocabulary.
static int64_t vocab_index(const vocab *v, uint32_t c) {
  const uint32_t *hit = bsearch(&c, v->chars, (size_t)v->size, sizeof c, cmp_u32);
  return hit ? hit - v->chars : -1;
}

// Appends one code point to out as UTF-8.
static int put_char(bytes *out, uint32_t c) {
  char u[4];
  return bytes_put(out, u, (size_t)utf8_encode(c, u));
}

// itos for a run of tokens, as UTF-8 into out.
static int vocab_decode(const vocab *v, const int64_t *tok, int64_t n, bytes *out) {
  int rc = bytes_put(out, "", 0); // out->p is a string even for n = 0
  for (int64_t i = 0; i < n && rc == CT_OK; ++i) rc = put_char(out, v->chars[tok[i]]);
  return rc;
}

// The whole vocabulary as one UTF-8 string (what checkpoints keep).
static int vocab_utf8(const vocab *v, bytes *out) {
  int rc = bytes_put(out, "", 0);
  for (int64_t i = 0; i < v->size && rc == CT_OK; ++i) rc = put_char(out, v->chars[i]);
  return rc;
}

// The corpus as tokens, split 90/10.
typedef struct corpus {
  vocab voc;
  int64_t *tokens, n;   // all of it
  int64_t n_train;      // tokens[0, n_train) train, [n_train, n) val
  int64_t bytes;        // UTF-8 size of the text
} corpus;

static int corpus_open(const char *spec, corpus *c) {
  memset(c, 0, sizeof *c);
  bytes text = {0};
  uint32_t *cp = NULL;
  int64_t n = 0;
  int rc = load_corpus(spec, &text);
  if (rc == CT_OK) rc = utf8_decode(spec, &text, &cp, &n);
  if (rc == CT_OK) rc = vocab_build(cp, n, &c->voc);
  if (rc == CT_OK && !(c->tokens = malloc((size_t)(n ? n : 1) * sizeof *c->tokens)))
    rc = ct_fail(CT_ERR_OOM, "ch14: out of host memory");
  for (int64_t i = 0; rc == CT_OK && i < n; ++i) c->tokens[i] = vocab_index(&c->voc, cp[i]); // encode
  c->n = n, c->n_train = (int64_t)(0.9 * (double)n), c->bytes = (int64_t)text.n;
  free(cp);
  free(text.p);
  return rc;
}

static void corpus_free(corpus *c) {
  free(c->voc.chars);
  free(c->tokens);
}
/*md twin data*/

// The start of window `row` of draw `draw` (a step, or an eval batch) from a
// split of n tokens: uniform in [0, n - T), from Philox's counter (draw, row,
// 0, tag) under the run's seed. Pure: the same arguments, the same start.
static int64_t window_start(uint64_t seed, uint32_t tag, int64_t draw, int64_t row, int64_t n, int64_t T) {
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  const uint32_t ctr[4] = {(uint32_t)draw, (uint32_t)row, (uint32_t)(row >> 32), tag};
  uint32_t out[4];
  ct_philox4x32_10(ctr, key, out);
  uint64_t u = (uint64_t)out[0] | (uint64_t)out[1] << 32;
  return (int64_t)(u % (uint64_t)(n - T));
}

// x = data[i : i+T], y = data[i+1 : i+T+1] for each start i: (B, T) int64
// tensors on the device.
static int make_batch(const int64_t *data, const int64_t *starts, int64_t B, int64_t T, ct_device dev,
                      ct_tensor **x, ct_tensor **y) {
  int64_t *hx = malloc((size_t)(B * T) * sizeof *hx), *hy = malloc((size_t)(B * T) * sizeof *hy);
  *x = *y = NULL;
  if (hx && hy) {
    for (int64_t b = 0; b < B; ++b) {
      memcpy(hx + b * T, data + starts[b], (size_t)T * sizeof *hx);
      memcpy(hy + b * T, data + starts[b] + 1, (size_t)T * sizeof *hy);
    }
    *x = ct_from_host(hx, CT_SHAPE(B, T), CT_I64, dev);
    *y = *x ? ct_from_host(hy, CT_SHAPE(B, T), CT_I64, dev) : NULL;
  } else {
    ct_fail(CT_ERR_OOM, "ch14: out of host memory");
  }
  free(hx), free(hy);
  if (!*y) {
    ct_free(*x);
    *x = NULL;
    return -1;
  }
  return CT_OK;
}

// The batch a draw takes from a split (tokens[base, base + n)): rows
// rank*B .. rank*B + B-1 of the global batch, so that W processes with B
// rows each draw the windows one process with W*B rows draws.
static int draw_batch(const corpus *c, bool val, uint64_t seed, uint32_t tag, int64_t draw, int rank, int64_t B,
                      int64_t T, ct_device dev, ct_tensor **x, ct_tensor **y, int64_t *starts) {
  const int64_t base = val ? c->n_train : 0, n = val ? c->n - c->n_train : c->n_train;
  for (int64_t b = 0; b < B; ++b) starts[b] = window_start(seed, tag, draw, rank * B + b, n, T);
  return make_batch(c->tokens + base, starts, B, T, dev, x, y);
}

static void show_data(const settings *s, const corpus *c, ct_metrics *m) {
  ct_cli_section("data");
  printf("corpus %s: %" PRId64 " bytes of UTF-8, %" PRId64 " characters\n", s->corpus, c->bytes, c->n);
  printf("vocabulary: %" PRId64 " distinct characters (sorted code points)\n", c->voc.size);
  bytes shown = {0};
  int64_t k = c->voc.size < 100 ? c->voc.size : 100;
  for (int64_t i = 0; i < k; ++i) {
    uint32_t ch = c->voc.chars[i];
    if (ch == '\n') bytes_put(&shown, "\\n", 2);
    else if (ch == '\t') bytes_put(&shown, "\\t", 2);
    else put_char(&shown, ch);
  }
  printf("  %s%s\n", shown.p ? shown.p : "", k < c->voc.size ? " ..." : "");
  free(shown.p);
  printf("split: %" PRId64 " train tokens, %" PRId64 " val tokens (90/10)\n", c->n_train, c->n - c->n_train);
  printf("chance: a uniform guess over the vocabulary has loss ln(%" PRId64 ") = %.4f\n", c->voc.size,
         log((double)c->voc.size));
  ct_metrics_str(m, "corpus", s->corpus);
  ct_metrics_num(m, "corpus_chars", (double)c->n);
  ct_metrics_num(m, "corpus_bytes", (double)c->bytes);
  ct_metrics_num(m, "vocab_size", (double)c->voc.size);
  ct_metrics_num(m, "train_tokens", (double)c->n_train);
  ct_metrics_num(m, "val_tokens", (double)(c->n - c->n_train));
  ct_metrics_num(m, "chance_loss", log((double)c->voc.size));
}
/*md output data*/

/*md
::: zh
## 模型：一棵和 nanoGPT 同名的模块树

模型的每一层都是运行时现成的模块（第 14 章之前的几个分支加进来的 Transformer 层：`ct_nn_embedding`、`ct_nn_layernorm`、`ct_nn_causal_self_attention`、`ct_nn_gelu`，加上早就有的 `ct_nn_linear`）。本章要做的是把它们按 nanoGPT 的结构装起来，并且让 `state_dict` 的键和 PyTorch 里一模一样：`transformer.wte.weight`、`transformer.h.0.attn.c_attn.weight`、`transformer.h.3.mlp.c_proj.bias`、`lm_head.weight`……`ct_nn_module_dict` 对应 `nn.ModuleDict`，`ct_nn_module_list` 对应 `nn.ModuleList`：它们只给子模块起名字，没有自己的前向（前向由本章写出来）。

`ct_module_tie(lm_head, "weight", wte, "weight")` 就是 GPT 里那一行 `self.transformer.wte.weight = self.lm_head.weight`：两个模块从此读写同一个张量，反向时两边的梯度加到同一个 `grad` 里。
:::
::: en
## The model: a module tree with nanoGPT's names

Every layer of the model is a module the runtime already has (the transformer layers added for this chapter: `ct_nn_embedding`, `ct_nn_layernorm`, `ct_nn_causal_self_attention`, `ct_nn_gelu`, and the old `ct_nn_linear`). This chapter assembles them the way nanoGPT does, so that the `state_dict` keys are exactly PyTorch's: `transformer.wte.weight`, `transformer.h.0.attn.c_attn.weight`, `transformer.h.3.mlp.c_proj.bias`, `lm_head.weight`, ... `ct_nn_module_dict` is `nn.ModuleDict` and `ct_nn_module_list` is `nn.ModuleList`: they name their children and have no forward of their own (the chapter writes it).

`ct_module_tie(lm_head, "weight", wte, "weight")` is GPT's line `self.transformer.wte.weight = self.lm_head.weight`: from then on both modules read and write one tensor, and in backward both add their gradients into its one `grad`.
:::
*/
typedef struct gpt_config {
  int64_t vocab_size, block_size, n_layer, n_head, n_embd;
} gpt_config;

typedef struct gpt_block {
  ct_module *ln_1, *attn, *ln_2, *c_fc, *gelu, *c_proj;
} gpt_block;

typedef struct gpt {
  gpt_config cfg;
  ct_module *root;                      // {transformer: {wte, wpe, h: [blocks], ln_f}, lm_head}
  ct_module *wte, *wpe, *ln_f, *lm_head;
  gpt_block *h;                         // n_layer blocks
  ct_tensor *pos;                       // arange(block_size) on the device, int64
} gpt;

// A ModuleDict of n modules, or NULL (the modules are freed either way).
static ct_module *dict(int n, const char *const *names, ct_module **mods) {
  for (int i = 0; i < n; ++i)
    if (!mods[i]) {
      for (int j = 0; j < n; ++j) ct_module_free(mods[j]);
      return NULL;
    }
  return ct_nn_module_dict(n, names, mods);
}

// One Block: ln_1, attn, ln_2, mlp {c_fc, gelu, c_proj}.
static ct_module *block_new(const gpt_config *c) {
  static const char *const mlp_names[3] = {"c_fc", "gelu", "c_proj"};
  ct_module *mlp[3] = {ct_nn_linear(c->n_embd, 4 * c->n_embd, true), ct_nn_gelu(true),
                       ct_nn_linear(4 * c->n_embd, c->n_embd, true)};
  static const char *const names[4] = {"ln_1", "attn", "ln_2", "mlp"};
  ct_module *mods[4] = {ct_nn_layernorm(c->n_embd, 1e-5), ct_nn_causal_self_attention(c->n_embd, c->n_head, true),
                        ct_nn_layernorm(c->n_embd, 1e-5), dict(3, mlp_names, mlp)};
  return dict(4, names, mods);
}

static ct_module *sub(ct_module *root, const char *fmt, int64_t i) {
  char path[96];
  snprintf(path, sizeof path, fmt, i);
  return ct_module_get_submodule(root, path);
}

static int gpt_init_weights(gpt *g);

// Builds the model on the CPU, then moves it to dev; GPT-2's initialization.
static int gpt_build(gpt *g, gpt_config cfg, ct_device dev) {
  memset(g, 0, sizeof *g);
  g->cfg = cfg;
  ct_module **blocks = calloc((size_t)cfg.n_layer, sizeof *blocks);
  g->h = calloc((size_t)cfg.n_layer, sizeof *g->h);
  if (!blocks || !g->h) {
    free(blocks);
    return ct_fail(CT_ERR_OOM, "ch14: out of host memory");
  }
  for (int64_t l = 0; l < cfg.n_layer; ++l) blocks[l] = block_new(&cfg);
  bool ok = true;
  for (int64_t l = 0; l < cfg.n_layer; ++l) ok = ok && blocks[l];
  ct_module *h = ok ? ct_nn_module_list((int)cfg.n_layer, blocks) : NULL;
  if (!h)
    for (int64_t l = 0; l < cfg.n_layer; ++l) ct_module_free(blocks[l]);
  free(blocks);
  static const char *const tnames[4] = {"wte", "wpe", "h", "ln_f"};
  ct_module *tmods[4] = {ct_nn_embedding(cfg.vocab_size, cfg.n_embd), ct_nn_embedding(cfg.block_size, cfg.n_embd), h,
                         ct_nn_layernorm(cfg.n_embd, 1e-5)};
  static const char *const rnames[2] = {"transformer", "lm_head"};
  ct_module *rmods[2] = {dict(4, tnames, tmods), ct_nn_linear(cfg.n_embd, cfg.vocab_size, false)};
  if (!(g->root = dict(2, rnames, rmods))) return -1;
  g->wte = sub(g->root, "transformer.wte", 0);
  g->wpe = sub(g->root, "transformer.wpe", 0);
  g->ln_f = sub(g->root, "transformer.ln_f", 0);
  g->lm_head = sub(g->root, "lm_head", 0);
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    gpt_block *b = &g->h[l];
    b->ln_1 = sub(g->root, "transformer.h.%" PRId64 ".ln_1", l);
    b->attn = sub(g->root, "transformer.h.%" PRId64 ".attn", l);
    b->ln_2 = sub(g->root, "transformer.h.%" PRId64 ".ln_2", l);
    b->c_fc = sub(g->root, "transformer.h.%" PRId64 ".mlp.c_fc", l);
    b->gelu = sub(g->root, "transformer.h.%" PRId64 ".mlp.gelu", l);
    b->c_proj = sub(g->root, "transformer.h.%" PRId64 ".mlp.c_proj", l);
  }
  // lm_head.weight is wte.weight: one tensor, two names, one gradient
  if (ct_module_tie(g->lm_head, "weight", g->wte, "weight") != CT_OK) return -1;
  if (gpt_init_weights(g) != CT_OK || ct_module_to(g->root, dev) != CT_OK) return -1;
  g->pos = ct_arange(0, (double)cfg.block_size, 1, CT_I64, dev);
  return g->pos ? CT_OK : -1;
}

static void gpt_free(gpt *g) {
  ct_module_free(g->root);
  ct_free(g->pos);
  free(g->h);
  memset(g, 0, sizeof *g);
}

static bool ends_with(const char *s, const char *tail) {
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && strcmp(s + a - b, tail) == 0;
}
/*md twin model*/

/*md
::: zh
### 初始化

运行时的模块按 `torch.nn` 的默认方式初始化（Linear 是 U(−1/√in, 1/√in)，Embedding 是 N(0, 1)）。GPT-2 不用这些默认值：所有矩阵（Linear 和两个 Embedding 的权重）取 N(0, 0.02²)，偏置取 0，每个残差分支最后的投影（`attn.c_proj` 和 `mlp.c_proj`）再缩小到 0.02/√(2·n_layer)，这样 n_layer 个块的输出加到残差流上之后，方差不随层数增长。这一点不能省：`wte` 同时是输出层，如果它是 N(0, 1)，最初的 logits 就大到几十，初始损失远高于"均匀猜测"的 ln V。
:::
::: en
### Initialization

The runtime's modules initialize as `torch.nn` does by default (Linear U(−1/√in, 1/√in), Embedding N(0, 1)). GPT-2 does not use those: every matrix (the Linear weights and both embeddings) is N(0, 0.02²), biases are 0, and the last projection of each residual branch (`attn.c_proj` and `mlp.c_proj`) is scaled down to 0.02/√(2·n_layer), so that the n_layer blocks' outputs added to the residual stream do not make its variance grow with depth. This matters: `wte` is also the output layer, and were it N(0, 1) the first logits would be tens in size and the first loss far above the uniform guess's ln V.
:::
*/
static int gpt_init_weights(gpt *g) {
  int n = 0;
  ct_param **p = ct_module_parameters(g->root, &n); // the tied weight once
  const double proj_std = 0.02 / sqrt(2.0 * (double)g->cfg.n_layer);
  for (int i = 0; i < n; ++i) {
    ct_tensor *v = p[i]->value, *r = NULL;
    int rc;
    if (ct_ndim(v) == 2) { // Linear and Embedding weights: N(0, std^2)
      double std = ends_with(p[i]->name, "c_proj.weight") ? proj_std : 0.02;
      ct_tensor *z = ct_randn(ct_shape_of(v), CT_F32, ct_device_of(v));
      r = z ? ct_mul_scalar(z, std) : NULL;
      ct_free(z);
      rc = r ? ct_copy_(v, r, false) : -1;
    } else if (ends_with(p[i]->name, "bias")) {
      rc = ct_zero_(v);
    } else {
      rc = CT_OK; // LayerNorm's weight stays 1
    }
    ct_free(r);
    if (rc != CT_OK) return -1;
  }
  return CT_OK;
}

/*md
::: zh
## 块里的三样东西

**LayerNorm**（`ct_nn_layernorm`）对每个位置的 C 个数单独做标准化：减去它们的均值，除以 √(方差 + ε)，再乘以可学习的 `weight`、加上 `bias`。和第 6 章的 BatchNorm 不同，它不跨 batch 统计，所以训练和推理的行为一样，也不需要 running 统计量。它让每个分支的输入尺度稳定，不管残差流已经累加了多少层。

**因果自注意力**（`ct_nn_causal_self_attention`）是模型里唯一让位置之间交换信息的地方。`c_attn` 一个矩阵乘法同时算出每个位置的 query、key、value 三个向量（各 C 维），再切成 n_head 个头、每头 hs = C/n_head 维。对每个头：S = q kᵀ 是 (T, T) 的打分矩阵，第 t 行第 j 列是位置 t 对位置 j 的兴趣；除以 √hs 让打分的方差不随 hs 变大；因果掩码把 j > t 的位置设为 −∞（softmax 之后是 0），于是 P 的第 t 行是位置 t 对它之前各位置的权重，和为 1；y = P v 按这些权重混合 value。各头的结果拼回 C 维，`c_proj` 再做一次线性变换。这就是 `F.scaled_dot_product_attention(q, k, v, is_causal=True)`。运行时里这一段是：
:::
::: en
## The three things in a block

**LayerNorm** (`ct_nn_layernorm`) standardizes each position's C numbers on their own: subtract their mean, divide by √(variance + ε), multiply by the learned `weight` and add `bias`. Unlike chapter 6's BatchNorm it computes no statistics across the batch, so it behaves the same in training and inference and needs no running statistics. It keeps the scale of each branch's input steady, however many layers the residual stream has accumulated.

**Causal self-attention** (`ct_nn_causal_self_attention`) is the only place in the model where positions exchange information. One matrix product, `c_attn`, computes each position's query, key and value vectors (C each), which are cut into n_head heads of hs = C/n_head. For each head: S = q kᵀ is a (T, T) matrix of scores, row t column j being position t's interest in position j; dividing by √hs keeps the scores' variance from growing with hs; the causal mask sets j > t to −∞ (0 after the softmax), so row t of P holds position t's weights over the positions up to it, summing to 1; y = P v mixes the values by those weights. The heads' results are put back side by side into C and `c_proj` applies one more linear map. This is `F.scaled_dot_product_attention(q, k, v, is_causal=True)`. In the runtime that part reads:
:::
*/
/*md source common/nn/nn_attention.c attention_forward*/

/*md
::: zh
两个矩阵乘法是批量的（`ct_bmm`，B·n_head 个 (T, hs) 矩阵一起算，kᵀ 不用真的转置，GEMM 按转置读它）；softmax 是 Transformer 核函数族里的一个核函数，它在同一遍里做缩放、掩码、减最大值和求指数。前向把 q、k、v 和 P 留给反向。P 有 B·n_head·T² 个数，T 加倍它就变成四倍：这是注意力在长上下文里最贵的地方（见下面的"内存"一节）。

**MLP** 是逐位置的两层网络：`c_fc` 把 C 维放大到 4C，GELU（tanh 近似：x/2·(1 + tanh(√(2/π)(x + 0.044715x³)))，也就是 GPT-2 原来的代码和 llm.c 用的形式，PyTorch 里是 `nn.GELU(approximate="tanh")`）做非线性。nanoGPT 的 MLP 用的是精确的 GELU（`nn.GELU()`，x·Φ(x)，用 erf 算）；两者之差不到千分之一，但逐位比较时要用同一种，本章和它的孪生程序都用 tanh 形式。`c_proj` 再压回 C。注意力负责"从哪里取信息"，MLP 负责"对取来的信息做什么"；参数的三分之二在 MLP 里。
:::
::: en
Both matrix products are batched (`ct_bmm`, B·n_head matrices of (T, hs) at once; kᵀ is not really transposed, the GEMM reads it as transposed); the softmax is one kernel of the transformer family, which scales, masks, subtracts the maximum and exponentiates in one pass. The forward keeps q, k, v and P for the backward. P holds B·n_head·T² numbers, four times as many when T doubles: that is where attention is most expensive on long contexts (see the memory section below).

**The MLP** is a two-layer network applied at each position alone: `c_fc` widens C to 4C, GELU (the tanh approximation, x/2·(1 + tanh(√(2/π)(x + 0.044715x³))): the form of GPT-2's original code and of llm.c, `nn.GELU(approximate="tanh")` in PyTorch) is the nonlinearity; nanoGPT's MLP uses the exact GELU (`nn.GELU()`, x·Φ(x) computed with erf). The two differ by less than a thousandth, but a bit-for-bit comparison needs the same one on both sides, and this chapter and its twin use the tanh form; `c_proj` brings it back to C. Attention decides where information comes from; the MLP decides what to do with it. Two thirds of the parameters are in the MLPs.
:::
*/

/*md
::: zh
## 前向：一个块就是两次"加回残差"

输入是 (B, T) 个 token。`wte(idx)` 查表得到 (B, T, C)，`wpe(pos)` 给 T 个位置各一个 C 维向量 (T, C)，两者相加（位置向量广播到 batch 的每一行）就是残差流 x。之后每个块做两件事：

```
x = x + attn(ln_1(x))      # 每个位置看它之前（含自己）的所有位置
x = x + mlp(ln_2(x))       # 每个位置单独过一个两层的 MLP：C -> 4C -> GELU -> C
```

这就是 pre-norm：LayerNorm 在分支的入口，残差流本身从不被归一化，从 `wte` 一直加到 `ln_f`。最后 `ln_f` 把它归一化，`lm_head` 把每个位置的 C 维向量乘上 `wteᵀ`，得到 (B, T, V) 的 logits：第 t 个位置的 V 个数，是模型对第 t+1 个字符的打分。损失是所有 B·T 个位置的交叉熵的平均（`ct_cross_entropy`，就是 `F.cross_entropy(logits.view(-1, V), targets.view(-1))`）。

训练模式下每个模块在前向时保存自己反向要用的东西（LayerNorm 的输入、均值和 1/σ，Linear 的输入，注意力的 q、k、v 和概率矩阵 P，GELU 的输入），所以这里算完的中间张量可以马上释放：模块手里还有引用。
:::
::: en
## Forward: a block is two residual additions

The input is (B, T) tokens. `wte(idx)` looks up (B, T, C), `wpe(pos)` gives each of the T positions a C-vector, (T, C), and their sum (the position table broadcast over the batch) is the residual stream x. Then each block does two things:

```
x = x + attn(ln_1(x))      # each position looks at every position before it (itself included)
x = x + mlp(ln_2(x))       # each position alone through a two-layer MLP: C -> 4C -> GELU -> C
```

That is pre-norm: the LayerNorm sits at the entrance of each branch, and the residual stream itself is never normalized, from `wte` all the way to `ln_f`. Finally `ln_f` normalizes it and `lm_head` multiplies each position's C-vector by `wteᵀ`, giving (B, T, V) logits: the V numbers at position t are the model's scores for character t+1. The loss is the mean cross-entropy over all B·T positions (`ct_cross_entropy`, which is `F.cross_entropy(logits.view(-1, V), targets.view(-1))`).

In training mode each module keeps during the forward what its backward needs (LayerNorm its input, mean and 1/σ; Linear its input; attention q, k, v and the probabilities P; GELU its input), so the intermediate tensors here can be freed at once: the modules hold references.
:::
*/
/*md
::: zh
{{fig block}} 从下标走到损失。字符编号 (B, T) 经词嵌入加位置嵌入变成 (B, T, C)；每个块先 `ln_1`，注意力把它投影成 q、k、v，各为 (B, nh, T, hs)，按因果掩码算完再拼回 (B, T, C)，经 `c_proj` 加回残差；再 `ln_2`，MLP 先升到 (B, T, 4C)，过 GELU（GPT-2 和 llm.c 的 tanh 近似），再降回 (B, T, C)，第二次加回残差。n_layer 个块之后是 `ln_f` 和 `lm_head`，得到 (B, T, V) 的 logits。虚线是残差：每个块只往主干上“加”东西，形状始终是 (B, T, C)。
:::
::: en
{{fig block}} walks from the indices to the loss. Character ids (B, T) become (B, T, C) through the token plus position embeddings; each block applies `ln_1`, attention projects it to q, k, v, each (B, nh, T, hs), computes causally masked attention and joins the heads back to (B, T, C), which `c_proj` maps and the residual adds; then `ln_2`, and the MLP widens to (B, T, 4C), applies GELU (the tanh form of GPT-2 and llm.c) and narrows back to (B, T, C) for the second residual addition. After n_layer blocks come `ln_f` and `lm_head`, giving logits of shape (B, T, V). The dashed lines are the residual stream: a block only adds to it, and its shape stays (B, T, C).
:::
*/
/*md figure block: GPT 的前向和每个张量的形状（B 批大小，T 位置数，C = n_embd，nh 头数，hs = C/nh，V 词表大小） | The GPT's forward with each tensor's shape (B batch, T positions, C = n_embd, nh heads, hs = C/nh, V vocabulary)*/
// Runs x through the modules m[0], ..., m[n-1] (a branch), freeing the middles.
static ct_tensor *forward_through(ct_module *const *m, int n, const ct_tensor *x) {
  ct_tensor *h = x ? ct_retain((ct_tensor *)x) : NULL;
  for (int i = 0; i < n && h; ++i) {
    ct_tensor *next = ct_module_forward(m[i], h);
    ct_free(h);
    h = next;
  }
  return h;
}

// x + f(x), a residual connection; consumes x and fx.
static ct_tensor *residual(ct_tensor *x, ct_tensor *fx) {
  ct_tensor *y = x && fx ? ct_add(x, fx) : NULL;
  ct_free(x), ct_free(fx);
  return y;
}

// logits (B, T, V) for idx (B, T) int64, T <= block_size.
static ct_tensor *gpt_forward(gpt *g, const ct_tensor *idx) {
  const int64_t T = ct_size(idx, 1);
  ct_tensor *pos = ct_narrow(g->pos, 0, 0, T); // arange(T)
  ct_tensor *tok = ct_module_forward(g->wte, idx), *pe = pos ? ct_module_forward(g->wpe, pos) : NULL;
  ct_tensor *x = residual(tok, pe); // (B, T, C) + (T, C): the position table broadcast over the batch
  ct_free(pos);
  for (int64_t l = 0; l < g->cfg.n_layer && x; ++l) {
    const gpt_block *b = &g->h[l];
    ct_module *attn[2] = {b->ln_1, b->attn}, *mlp[4] = {b->ln_2, b->c_fc, b->gelu, b->c_proj};
    x = residual(x, forward_through(attn, 2, x)); // x = x + attn(ln_1(x))
    x = residual(x, forward_through(mlp, 4, x));  // x = x + mlp(ln_2(x))
  }
  ct_module *head[2] = {g->ln_f, g->lm_head};
  ct_tensor *logits = forward_through(head, 2, x); // lm_head(ln_f(x))
  ct_free(x);
  return logits;
}

/*md
::: zh
## 反向：写出来的 autograd

PyTorch 的 `loss.backward()` 沿着前向记下的图倒着走。这里把这张图倒着写出来，每一步都是某条规则的直接应用：

- **损失**：`ct_cross_entropy` 同时给出 dL/dlogits = (softmax − onehot) / (B·T)。
- **`lm_head` 和 `ln_f`**：各自的 `backward` 把 dL/d输出 变成 dL/d输入，同时把参数的梯度**加**进 `grad`。`lm_head.weight` 就是 `wte.weight`，所以这是那个共享张量梯度的第一项。
- **残差**：y = x + f(x) 的梯度同时流向两条路：dL/dx = dL/dy + (f 的反向)(dL/dy)。代码里就是 `residual(dx, backward_through(branch, dx))`：把 dL/dy 倒着送过分支的模块（MLP 是 c_proj、gelu、c_fc、ln_2），得到分支那一份，再和直通的那一份相加。块按相反的顺序走，每个块里先 MLP 分支、后注意力分支。
- **嵌入**：x = wte(idx) + wpe(pos)。token 嵌入的梯度是 dL/dx 按 token 编号累加到 `wte.grad` 的行上，这是共享权重梯度的第二项。位置表 (T, C) 被广播到 batch 的每一行，广播的反向是求和：`wpe` 的梯度是 dL/dx 在 batch 维上的和 `ct_sum_dim(dx, 0)`。输入的 token 不需要梯度，所以两个嵌入都用 `ct_module_backward_params`。
:::
::: en
## Backward: autograd written out

PyTorch's `loss.backward()` walks the graph the forward pass recorded, in reverse. Here that walk is written out, each step a direct use of one rule:

- **The loss**: `ct_cross_entropy` also gives dL/dlogits = (softmax − onehot) / (B·T).
- **`lm_head` and `ln_f`**: each one's `backward` turns dL/d(output) into dL/d(input) and **adds** its parameters' gradients into their `grad`. `lm_head.weight` is `wte.weight`, so this is the first term of the shared tensor's gradient.
- **The residuals**: the gradient of y = x + f(x) flows down both paths: dL/dx = dL/dy + (f's backward)(dL/dy). In the code that is `residual(dx, backward_through(branch, dx))`: dL/dy goes backwards through the branch's modules (for the MLP: c_proj, gelu, c_fc, ln_2) to give the branch's share, which is added to the share that passed straight through. Blocks go in reverse order, and within a block the MLP branch before the attention branch.
- **The embeddings**: x = wte(idx) + wpe(pos). The token embedding's gradient is dL/dx added into the rows of `wte.grad` by token number: the shared weight's second term. The position table (T, C) was broadcast over the batch, and the backward of a broadcast is a sum: `wpe`'s gradient is dL/dx summed over the batch dimension, `ct_sum_dim(dx, 0)`. The input tokens need no gradient, so both embeddings use `ct_module_backward_params`.
:::
*/
// dy backwards through the branch m[0..n-1]: m[n-1]'s backward first.
static ct_tensor *backward_through(ct_module *const *m, int n, const ct_tensor *dy) {
  ct_tensor *d = dy ? ct_retain((ct_tensor *)dy) : NULL;
  for (int i = n - 1; i >= 0 && d; --i) {
    ct_tensor *next = ct_module_backward(m[i], d);
    ct_free(d);
    d = next;
  }
  return d;
}

// Backward from dL/dlogits of the last training forward: every parameter's
// grad accumulated (the tied weight gets lm_head's term and wte's).
static int gpt_backward(gpt *g, const ct_tensor *dlogits) {
  ct_module *head[2] = {g->ln_f, g->lm_head};
  ct_tensor *dx = backward_through(head, 2, dlogits); // (B, T, C)
  for (int64_t l = g->cfg.n_layer - 1; l >= 0 && dx; --l) {
    const gpt_block *b = &g->h[l];
    ct_module *attn[2] = {b->ln_1, b->attn}, *mlp[4] = {b->ln_2, b->c_fc, b->gelu, b->c_proj};
    dx = residual(dx, backward_through(mlp, 4, dx));  // both paths of x + mlp(ln_2(x))
    dx = residual(dx, backward_through(attn, 2, dx)); // both paths of x + attn(ln_1(x))
  }
  if (!dx) return -1;
  int rc = ct_module_backward_params(g->wte, dx);           // rows of wte.grad, by token
  ct_tensor *dpos = rc ? NULL : ct_sum_dim(dx, 0, false);   // (T, C): the batch shared one table
  rc = dpos ? ct_module_backward_params(g->wpe, dpos) : -1;
  ct_free(dpos), ct_free(dx);
  return rc;
}

/*md
::: zh
### 注意力的反向

`backward_through` 里对注意力模块的那一次调用，展开就是下面这一段（运行时 `common/nn/nn_attention.c` 的 `attn_grads`；它也是本章的一个实验区）。c_proj 的反向先给出 dL/dY，按头切开成 dYh。前向是 Yh = P v，矩阵乘法的两条规则给出 dP = dYh vᵀ 和 dv = Pᵀ dYh。softmax 的反向：P 的第 t 行只依赖 S 的第 t 行，对一行 p = softmax(s) 有 ds = p ⊙ (dp − ⟨p, dp⟩)，再乘上前向用过的缩放 1/√hs；被掩码的位置 p = 0，梯度自然是 0，不需要再掩一次。最后 S = q kᵀ 给出 dq = dS k 和 dk = dSᵀ q。q、k、v 的梯度按前向切开的方式拼回 (B, T, 3C)，交给 c_attn 的反向。五个矩阵乘法加一个逐行的核函数，没有别的。
:::
::: en
### Attention's backward

The one call on the attention module in `backward_through` unfolds into the code below (the runtime's `attn_grads` in `common/nn/nn_attention.c`; it is also one of this chapter's lab regions). c_proj's backward gives dL/dY first, cut by heads into dYh. The forward was Yh = P v, and the two rules of a matrix product give dP = dYh vᵀ and dv = Pᵀ dYh. The softmax's backward: row t of P depends only on row t of S, and for one row p = softmax(s), ds = p ⊙ (dp − ⟨p, dp⟩), times the forward's scale 1/√hs; masked positions have p = 0 and so a zero gradient, with no second mask needed. Finally S = q kᵀ gives dq = dS k and dk = dSᵀ q. The gradients of q, k and v are put back into (B, T, 3C) the way the forward cut them, and c_attn's backward takes it from there. Five matrix products and one row-wise kernel, nothing else.
:::
*/
/*md source common/nn/nn_attention.c attention_backward*/

static void show_model(const gpt *g, ct_metrics *m) {
  ct_cli_section("model");
  const gpt_config *c = &g->cfg;
  printf("GPT: n_layer %" PRId64 ", n_head %" PRId64 ", n_embd %" PRId64 ", block_size %" PRId64 ", vocab_size %" PRId64
         "\n", c->n_layer, c->n_head, c->n_embd, c->block_size, c->vocab_size);
  int n_state = 0, n_params = 0;
  ct_param **state = ct_module_state(g->root, &n_state);
  ct_module_parameters(g->root, &n_params);
  int64_t numel = ct_module_num_elements(g->root), wpe = c->block_size * c->n_embd;
  printf("parameters: %" PRId64 " in %d tensors (the tied wte/lm_head weight counted once); "
         "%" PRId64 " without wpe, as GPT-2 counts\n", numel, n_params, numel - wpe);
  printf("state_dict: %d keys (lm_head.weight and transformer.wte.weight both listed, one tensor)\n", n_state);
  for (int i = 0; i < n_state; ++i) { // the first block's keys and the others outside h
    const char *name = state[i]->name;
    if (strncmp(name, "transformer.h.", 14) == 0 && strncmp(name, "transformer.h.0.", 16) != 0) continue;
    char sh[64];
    printf("  %-40s %s\n", name, ct_shape_str(ct_shape_of(state[i]->value), sh, sizeof sh));
  }
  if (c->n_layer > 1) printf("  ... and the same for transformer.h.1 to transformer.h.%" PRId64 "\n", c->n_layer - 1);
  ct_metrics_num(m, "num_params", (double)numel);
  ct_metrics_num(m, "n_layer", (double)c->n_layer);
  ct_metrics_num(m, "n_head", (double)c->n_head);
  ct_metrics_num(m, "n_embd", (double)c->n_embd);
  ct_metrics_num(m, "block_size", (double)c->block_size);
  ct_metrics_num(m, "state_dict_keys", n_state);
}
/*md output model*/

/*md
::: zh
## 优化：AdamW、带预热的余弦学习率、梯度裁剪

nanoGPT 的 AdamW 有两个参数组：二维的权重（Linear 和 Embedding 的矩阵）做权重衰减，一维的偏置和 LayerNorm 参数不做。运行时的优化器只有一个参数组，但 AdamW 的"解耦"权重衰减本来就是独立的一步：`torch.optim.AdamW` 在每一步更新之前先做 `param.mul_(1 - lr * weight_decay)`，然后才是 Adam 的那一步。所以本章用一个 `weight_decay = 0` 的 AdamW 管所有参数，在它之前自己对二维权重乘上 1 − lr·wd（`decay_weights`），结果和 PyTorch 的两个参数组一样（孪生程序用的正是两个参数组，下面的一致性测试逐步比较两边的损失）。

学习率先在 `warmup_iters` 步里线性升到 `lr`，再按余弦曲线在 `max_iters` 步降到 `min_lr`（`get_lr`，和 nanoGPT 的同名函数一样），每一步用 `ct_optimizer_set_lr` 设进优化器。余弦退火让训练后期的步子越来越小，损失更稳地落到谷底；预热避免了最初几步 Adam 的二阶矩估计还不准的时候步子太大。

梯度裁剪 `ct_clip_grad_norm_(params, n, 1.0)` 算出所有梯度拼成一个向量后的 L2 范数，超过 1.0 就整体缩小到 1.0。它防止个别坏 batch 的大梯度把训练推离轨道。有一个细节：范数要在 AdamW 之前、在 GradScaler 反缩放（`unscale_`）之后算，否则裁剪看到的是放大了 2¹⁶ 倍的梯度（第 9 章）。
:::
::: en
## Optimization: AdamW, a cosine schedule with warm-up, gradient clipping

nanoGPT's AdamW has two parameter groups: the 2-D weights (the Linear and Embedding matrices) are decayed, the 1-D biases and LayerNorm parameters are not. The runtime's optimizers have one group, but AdamW's "decoupled" weight decay is a step of its own anyway: before each update `torch.optim.AdamW` does `param.mul_(1 - lr * weight_decay)`, and only then Adam's step. So this chapter runs one AdamW with `weight_decay = 0` over every parameter and, just before it, multiplies the 2-D weights by 1 − lr·wd itself (`decay_weights`), which is what PyTorch's two groups do (the twin uses the two groups, and the agreement test below compares both sides' losses step by step).

The learning rate rises linearly to `lr` over `warmup_iters` steps, then follows a cosine down to `min_lr` at `max_iters` (`get_lr`, nanoGPT's function of that name), set into the optimizer every step with `ct_optimizer_set_lr`. The cosine decay makes the late steps ever smaller, so the loss settles into its valley; the warm-up keeps the first steps small while Adam's second-moment estimates are still poor.

Gradient clipping, `ct_clip_grad_norm_(params, n, 1.0)`, takes the L2 norm of all gradients as one vector and scales them all down to 1.0 when it is larger. It keeps the large gradient of an odd batch from throwing training off course. One detail: the norm must be taken before AdamW and after the GradScaler's `unscale_`, or clipping sees gradients 2¹⁶ times too large (chapter 9).
:::
*/
static double get_lr(const settings *s, int64_t it) {
  /* LAB BEGIN: linear warm-up to lr over warmup_iters steps ((it+1)/(warmup_iters+1)), then cosine decay to min_lr at max_iters */
  if (it < s->warmup_iters) return s->lr * (double)(it + 1) / (double)(s->warmup_iters + 1);
  if (it >= s->max_iters) return s->min_lr;
  double ratio = (double)(it - s->warmup_iters) / (double)(s->max_iters - s->warmup_iters);
  double coeff = 0.5 * (1.0 + cos(acos(-1.0) * ratio)); // 1 -> 0
  return s->min_lr + coeff * (s->lr - s->min_lr);
  /* LAB END */
}

// Everything a training step touches.
typedef struct trainer {
  const settings *s;
  const ct_cli *cli;
  gpt *g;
  ct_device dev;
  ct_optimizer *opt;          // AdamW, weight_decay 0 (the decay is decay_weights')
  ct_param **params, **decay; // all parameters; the 2-D ones, which decay
  int n_params, n_decay;
  ct_dtype amp;               // CT_F32: autocast off
  ct_grad_scaler *scaler;     // float16 only
  ct_process_group *pg;       // NULL: one process
  ct_ddp *ddp;                // DDP over the model, for its gradient all-reduce
  int rank, world;
  // --graphs: the step's forward and backward captured once, replayed after
  ct_cuda_graph *graph;
  ct_stream *side;
  ct_tensor *sx, *sy, *sloss; // static input, target and loss
} trainer;

// AdamW's decoupled weight decay for the 2-D weights: p *= 1 - lr * wd.
static int decay_weights(trainer *t, double lr) {
  const double f = 1.0 - lr * t->s->weight_decay;
  for (int i = 0; i < t->n_decay; ++i)
    if (ct_binary_scalar_out(CT_OP_MUL, t->decay[i]->value, t->decay[i]->value, f) != CT_OK) return -1;
  return CT_OK;
}

static int trainer_init(trainer *t, const settings *s, gpt *g, ct_device dev) {
  memset(t, 0, sizeof *t);
  t->s = s, t->g = g, t->dev = dev, t->world = 1;
  t->params = ct_module_parameters(g->root, &t->n_params);
  t->decay = calloc((size_t)t->n_params, sizeof *t->decay);
  if (!t->decay) return ct_fail(CT_ERR_OOM, "ch14: out of host memory");
  for (int i = 0; i < t->n_params; ++i)
    if (ct_ndim(t->params[i]->value) >= 2) t->decay[t->n_decay++] = t->params[i];
  ct_adam_options o = ct_adamw_defaults();
  o.lr = s->lr, o.beta2 = s->beta2, o.weight_decay = 0;
  t->opt = ct_optim_adamw(t->params, t->n_params, o);
  t->amp = strcmp(s->amp, "bf16") == 0 ? CT_BF16 : strcmp(s->amp, "fp16") == 0 ? CT_F16 : CT_F32;
  if (t->opt && t->amp == CT_F16) { // float16 needs the loss scaled (chapter 9); bfloat16 does not
    t->scaler = ct_grad_scaler_create(dev.type, ct_grad_scaler_defaults());
    if (!t->scaler) return -1;
  }
  return t->opt ? CT_OK : -1;
}
/*md twin optimizer*/

static void trainer_free(trainer *t) {
  ct_optimizer_free(t->opt);
  ct_grad_scaler_free(t->scaler);
  ct_ddp_free(t->ddp);
  ct_cuda_graph_free(t->graph);
  if (t->side) ct_stream_free(t->side);
  ct_free(t->sx), ct_free(t->sy), ct_free(t->sloss);
  free(t->decay);
}

static void show_optimizer(const trainer *t, ct_metrics *m) {
  const settings *s = t->s;
  ct_cli_section("optimizer");
  int64_t nd = 0, nn = 0;
  for (int i = 0; i < t->n_params; ++i)
    *(ct_ndim(t->params[i]->value) >= 2 ? &nd : &nn) += ct_numel(t->params[i]->value);
  printf("AdamW: betas (0.9, %g), eps 1e-8; weight decay %g on %d 2-D tensors (%" PRId64 " parameters), "
         "none on %d others (%" PRId64 ")\n", s->beta2, s->weight_decay, t->n_decay, nd, t->n_params - t->n_decay, nn);
  printf("lr: linear warm-up to %g over %ld steps, cosine decay to %g at step %ld\n", s->lr, s->warmup_iters,
         s->min_lr, s->max_iters);
  printf("lr at steps 0, %ld, %ld, %ld: %.3e %.3e %.3e %.3e\n", s->warmup_iters, s->max_iters / 2, s->max_iters,
         get_lr(s, 0), get_lr(s, s->warmup_iters), get_lr(s, s->max_iters / 2), get_lr(s, s->max_iters));
  printf("gradient clipping: global L2 norm %g\n", s->grad_clip);
  printf("batch: %ld windows of %ld tokens%s = %ld tokens per step\n", s->batch_size, s->block_size,
         t->world > 1 ? " per rank" : "", s->batch_size * s->block_size * t->world);
  ct_metrics_num(m, "lr", s->lr);
  ct_metrics_num(m, "min_lr", s->min_lr);
  ct_metrics_num(m, "warmup_iters", (double)s->warmup_iters);
  ct_metrics_num(m, "max_iters", (double)s->max_iters);
  ct_metrics_num(m, "batch_size", (double)s->batch_size);
  ct_metrics_num(m, "world_size", t->world);
  ct_metrics_num(m, "decay_params", (double)nd);
}
/*md output optimizer*/

/*md
::: zh
## 一步训练

一步训练分两半。`forward_backward` 是"算梯度"的一半：清零梯度、前向、交叉熵、反向；`update` 是"用梯度"的一半：（多进程时）把各进程的梯度取平均、（float16 时）反缩放、裁剪、权重衰减、AdamW。分开写是为了 `--graphs`：前一半的几百个核函数每步都一样，可以录成一张 CUDA Graph重放；后一半要读梯度范数、每步换学习率，留在图外面。
:::
::: en
## One training step

A training step has two halves. `forward_backward` computes the gradients: zero them, forward, cross-entropy, backward. `update` uses them: (with several processes) average them over the processes, (with float16) unscale them, clip, decay the weights, AdamW. They are apart because of `--graphs`: the first half's hundreds of kernels are the same every step and can be captured into a CUDA graph and replayed; the second half reads the gradient norm and changes the learning rate every step, and stays outside the graph.
:::
*/
// zero_grad, forward (under autocast with --amp), loss, backward. Returns
// the loss, a 0-d tensor on the device, or NULL.
static ct_tensor *forward_backward(trainer *t, const ct_tensor *x, const ct_tensor *y) {
  if (ct_optimizer_zero_grad(t->opt, true) != CT_OK) return NULL; // optimizer.zero_grad(set_to_none=True)
  if (t->amp != CT_F32 && ct_autocast_enter(t->dev.type, t->amp, true) != CT_OK) return NULL;
  ct_tensor *logits = gpt_forward(t->g, x), *dlogits = NULL;     // (B, T, V)
  ct_tensor *loss = logits ? ct_cross_entropy(logits, y, -100, &dlogits) : NULL;
  if (t->amp != CT_F32) ct_autocast_exit();
  ct_free(logits);
  ct_tensor *dscaled = dlogits && t->scaler ? ct_grad_scaler_scale(t->scaler, dlogits) : NULL; // scaler.scale(loss)
  int rc = loss && (dscaled || !t->scaler) ? gpt_backward(t->g, dscaled ? dscaled : dlogits) : -1; // .backward()
  ct_free(dlogits), ct_free(dscaled);
  if (rc != CT_OK) {
    ct_free(loss);
    return NULL;
  }
  return loss;
}
/*md twin step*/

/*md
::: zh
多个进程（`tools/launch`）时，模型用第 8 章的 DDP 包起来（`ct_ddp_create`，先把 rank 0 的权重广播给所有进程），每个进程在自己的窗口上算出梯度，`ct_ddp_allreduce_grads` 像 DDP 那样按桶把每个参数的梯度在所有进程间取平均，之后每个进程做的是同一步更新，参数始终一致。和第 8 章不同的是，all-reduce 要等整个反向结束才开始：前向和反向是本章自己写的，运行时无从知道手写的反向什么时候算完了一个桶，所以没有和反向重叠的好处。共享的权重是一个参数，只在一个桶里。
:::
::: en
With several processes (`tools/launch`) the model is wrapped in chapter 8's DDP (`ct_ddp_create`, which first broadcasts rank 0's weights), each process computes gradients on its own windows, and `ct_ddp_allreduce_grads` averages each parameter's gradient over the processes, bucket by bucket as DDP does; from there every process takes the same update and the parameters stay identical. Unlike chapter 8 the all-reduces start only after the whole backward: the forward and backward are this chapter's own code, and nothing tells the runtime when a hand-written backward has finished a bucket, so there is no overlap with backward to win. The tied weight is one parameter, in one bucket.
:::
*/
// The update from the gradients: *norm gets their global norm before clipping.
static int update(trainer *t, double lr, double *norm) {
  const settings *s = t->s;
  if (t->ddp && ct_ddp_allreduce_grads(t->ddp) != CT_OK) return -1;            // DDP's average over the ranks
  if (t->scaler && ct_grad_scaler_unscale_(t->scaler, t->opt) != CT_OK) return -1; // true gradients before clipping
  double max_norm = s->grad_clip > 0 ? s->grad_clip : INFINITY;
  if (ct_clip_grad_norm_(t->params, t->n_params, max_norm, norm) != CT_OK) return -1;
  if (ct_optimizer_set_lr(t->opt, lr) != CT_OK) return -1;
  // An inf/NaN gradient (float16 overflow) makes the scaler skip the step, decay included.
  if (isfinite(*norm) && decay_weights(t, lr) != CT_OK) return -1;
  if (!t->scaler) return ct_optimizer_step(t->opt);
  if (ct_grad_scaler_step(t->scaler, t->opt) != CT_OK) return -1;
  return ct_grad_scaler_update(t->scaler);
}

/*md
::: zh
### `--graphs`：把前一半录成 CUDA Graph

和第 10 章一样：先在一条旁路流上照常跑几步（`GRAPH_WARMUP`），让 cuBLAS 的工作区、优化器的状态这些只在第一次出现的东西都建好；然后在旁路流上捕获一次 `forward_backward(sx, sy)`，输入和目标是捕获之前建好的静态张量 `sx`、`sy`；之后每一步只是把新的 batch `copy_` 进这两个张量，再重放图。图里的核函数和即时执行完全相同，所以损失逐位相同（`chapter.ch14_graphs` 检查这一点）。没有 GPU 时运行时在 CPU 上按同样的规则录制和重放（第 10 章讲过）。
:::
::: en
### `--graphs`: the first half as a CUDA graph

As in chapter 10: a few steps (`GRAPH_WARMUP`) run as usual on a side stream, so that what exists only after a first use (cuBLAS's workspace, the optimizer's state) is made; then `forward_backward(sx, sy)` is captured once on the side stream, on the static input and target `sx` and `sy` made before the capture; from then on a step only `copy_`s the new batch into those two tensors and replays the graph. The graph's kernels are the eager run's, so the losses are the same bit for bit (`chapter.ch14_graphs` checks it). Without a GPU the runtime records and replays on the CPU under the same rules (chapter 10).
:::
*/
#define GRAPH_WARMUP 3
#define WARM_STEPS 10 // steps left out of the steady tokens/s (warm-up, graph capture)

// forward_backward through the graph: warm-up, capture, then replays. k
// counts the steps this process has run. Returns the loss (a new reference).
static ct_tensor *graphed_step(trainer *t, const ct_tensor *x, const ct_tensor *y, int64_t k) {
  if (ct_copy_(t->sx, x, false) != CT_OK || ct_copy_(t->sy, y, false) != CT_OK) return NULL; // static_input.copy_(x)
  ct_stream *main_stream = ct_current_stream(t->dev);
  if (k < GRAPH_WARMUP) { // eager, on the stream that will capture
    if (ct_stream_wait_stream(t->side, main_stream) != CT_OK || ct_set_stream(t->side) != CT_OK) return NULL;
    ct_tensor *loss = forward_backward(t, t->sx, t->sy);
    ct_set_stream(main_stream);
    if (loss && ct_stream_wait_stream(main_stream, t->side) != CT_OK) ct_free(loss), loss = NULL;
    return loss;
  }
  if (k == GRAPH_WARMUP) { // with torch.cuda.graph(g, stream=side): static_loss = step(sx, sy)
    if (ct_stream_synchronize(t->side) != CT_OK || ct_cuda_graph_capture_begin(t->graph, t->side, NULL) != CT_OK)
      return NULL;
    t->sloss = forward_backward(t, t->sx, t->sy);
    if (ct_cuda_graph_capture_end(t->graph) != CT_OK || !t->sloss) return NULL;
  }
  if (ct_cuda_graph_replay(t->graph) != CT_OK) return NULL; // g.replay()
  return ct_retain(t->sloss);
}

static int graphs_init(trainer *t) {
  const int64_t B = t->s->batch_size, T = t->s->block_size;
  t->graph = ct_cuda_graph_create();
  t->side = ct_stream_create(t->dev, 0);
  t->sx = ct_zeros(CT_SHAPE(B, T), CT_I64, t->dev);
  t->sy = ct_zeros(CT_SHAPE(B, T), CT_I64, t->dev);
  return t->graph && t->side && t->sx && t->sy ? CT_OK : -1;
}

// One training step at iteration `it` (the k-th of this process). Returns
// the loss (0-d, on the device) or NULL; *norm gets the gradient norm.
static ct_tensor *train_step(trainer *t, const ct_tensor *x, const ct_tensor *y, int64_t it, int64_t k, double *norm) {
  ct_tensor *loss = t->graph ? graphed_step(t, x, y, k) : forward_backward(t, x, y);
  if (loss && update(t, get_lr(t->s, it), norm) != CT_OK) {
    ct_free(loss);
    return NULL;
  }
  return loss;
}

/*md
::: zh
## 评估和采样

评估在 eval 模式下做（`ct_module_train(root, false)`：既是 `model.eval()` 也是 `torch.no_grad()`，前向什么也不保存）。训练集和验证集各取 `eval_iters` 个固定的 batch（它们的窗口起点只取决于种子和编号，每次评估都是同一批），报告平均损失。训练损失一直降、验证损失不再降甚至回升，就是模型开始背语料了；语料越小越早出现，中文语料尤其如此。

生成一个字符就是做一次前向：把当前的上下文（最多 `block_size` 个 token，更长就只取最后的那些）送进模型，取最后一个位置的 logits，除以温度 τ，只保留最大的 k 个（top-k），softmax 成概率，按概率抽一个 token 接在后面，重复。τ 越小分布越尖，τ → 0 就是每次取最大值（贪心，`--temperature 0`）；top-k 去掉长尾里那些不太可能、但加起来不少的字符。抽样用的均匀随机数也来自 Philox 的计数器（位置、第几次采样），所以同一个种子、同一个检查点，生成的文字相同。

这里没有 KV 缓存：每生成一个字符都把整个上下文重算一遍，代价是 O(T²)。对 `block_size` 只有几十到几百的模型，这样写最短也最清楚。
:::
::: en
## Evaluation and sampling

Evaluation runs in eval mode (`ct_module_train(root, false)`: both `model.eval()` and `torch.no_grad()`; the forward keeps nothing). The train and val splits each give `eval_iters` fixed batches (their window starts depend only on the seed and their number, so every evaluation sees the same ones), and the mean loss is reported. A training loss that keeps falling while the validation loss stops falling, or rises, means the model has begun to memorize the corpus; the smaller the corpus, the sooner, and the Chinese corpus is small.

Generating a character is one forward pass: the context so far (at most `block_size` tokens; of a longer one only the last) goes through the model, the last position's logits are divided by the temperature τ, only the k largest are kept (top-k), softmax makes them probabilities, one token is drawn and appended, and so on. The smaller τ, the sharper the distribution; τ → 0 takes the largest every time (greedy, `--temperature 0`); top-k cuts off the long tail of characters each unlikely but many together. The uniform numbers for the draws come from Philox's counter too (position, which sample), so the same seed and the same checkpoint write the same text.

There is no KV cache: every new character recomputes the whole context, at O(T²). For a `block_size` of tens to hundreds this is the shortest and clearest way.
:::
*/
// The mean loss over `iters` fixed batches of a split, in eval mode.
static int estimate_loss(trainer *t, const corpus *c, bool val, int64_t iters, double *out) {
  const int64_t B = t->s->batch_size, T = t->s->block_size;
  int64_t *starts = malloc((size_t)B * sizeof *starts);
  if (!starts) return ct_fail(CT_ERR_OOM, "ch14: out of host memory");
  ct_module_train(t->g->root, false); // model.eval() + torch.no_grad()
  ct_progress *bar = ct_progress_start_label(NULL, val ? "val loss" : "train loss", iters); // a terminal's only
  double sum = 0;
  int rc = CT_OK;
  int64_t done = 0;
  for (int64_t j = 0; j < iters && rc == CT_OK && !ct_cli_interrupt_pending(); ++j, ++done) { // Ctrl-C ends it
    ct_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    double l = NAN;
    rc = draw_batch(c, val, t->s->seed, val ? TAG_EVAL_VAL : TAG_EVAL_TRAIN, j, 0, B, T, t->dev, &x, &y, starts);
    if (rc == CT_OK && t->amp != CT_F32) rc = ct_autocast_enter(t->dev.type, t->amp, true);
    if (rc == CT_OK) {
      logits = gpt_forward(t->g, x);
      loss = logits ? ct_cross_entropy(logits, y, -100, NULL) : NULL;
      if (t->amp != CT_F32) ct_autocast_exit();
      rc = loss ? ct_item(loss, &l) : -1;
    }
    sum += l;
    ct_free(x), ct_free(y), ct_free(logits), ct_free(loss);
    ct_progress_step(bar, l, B);
  }
  ct_progress_clear(bar);
  ct_module_train(t->g->root, true);
  free(starts);
  *out = done ? sum / (double)done : NAN;
  return rc;
}

// A uniform in [0, 1) for draw `pos` of sample `id`: Philox's counter again.
static double sample_uniform(uint64_t seed, int64_t id, int64_t pos) {
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  const uint32_t ctr[4] = {(uint32_t)pos, (uint32_t)id, 0, TAG_SAMPLE};
  uint32_t out[4];
  ct_philox4x32_10(ctr, key, out);
  return (double)(out[0] >> 8) * 0x1p-24;
}

static int cmp_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x < y) - (x > y);
}

// The next token from one row of logits: the argmax when temperature <= 0,
// else a draw (uniform u) from softmax(logits / temperature) over the top_k
// largest (top_k <= 0: all). z is scratch of V doubles.
static int64_t pick_token(const float *logits, int64_t V, double temperature, int64_t top_k, double u, double *z) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (logits[i] > logits[best]) best = i; // the first maximum, as torch.argmax
  if (temperature <= 0) return best;
  /* LAB BEGIN: scale by 1/temperature, keep the top_k largest (the rest get probability 0), softmax, and return the token where the cumulative probability passes u */
  for (int64_t i = 0; i < V; ++i) z[i] = (double)logits[i] / temperature;
  double cut = -INFINITY; // logits below the k-th largest are dropped
  if (top_k > 0 && top_k < V) {
    double *sorted = z + V; // the second half of the scratch
    memcpy(sorted, z, (size_t)V * sizeof *z);
    qsort(sorted, (size_t)V, sizeof *sorted, cmp_desc);
    cut = sorted[top_k - 1];
  }
  const double zmax = z[best];
  double total = 0;
  for (int64_t i = 0; i < V; ++i) total += z[i] = z[i] < cut ? 0.0 : exp(z[i] - zmax);
  double target = u * total, acc = 0;
  for (int64_t i = 0; i < V; ++i)
    if (z[i] > 0 && (acc += z[i]) > target) return i;
  return best; // rounding left target at the very end
  /* LAB END */
}

// Appends n tokens to tok (len tokens so far; room for len + n), in eval mode.
static int generate(gpt *g, int64_t *tok, int64_t len, int64_t n, double temperature, int64_t top_k, uint64_t seed,
                    int64_t id) {
  const int64_t V = g->cfg.vocab_size;
  float *row = malloc((size_t)V * sizeof *row);
  double *z = malloc(2 * (size_t)V * sizeof *z);
  int rc = row && z ? CT_OK : ct_fail(CT_ERR_OOM, "ch14: out of host memory");
  const bool was_training = ct_module_is_training(g->root);
  ct_module_train(g->root, false);
  for (int64_t k = 0; k < n && rc == CT_OK; ++k) {
    int64_t t = len < g->cfg.block_size ? len : g->cfg.block_size; // crop the context to block_size
    ct_tensor *idx = ct_from_host(tok + len - t, CT_SHAPE(1, t), CT_I64, ct_module_device(g->root));
    ct_tensor *logits = idx ? gpt_forward(g, idx) : NULL;       // (1, t, V)
    ct_tensor *last = logits ? ct_select(logits, 1, t - 1) : NULL; // (1, V)
    ct_tensor *lc = last ? ct_contiguous(last) : NULL;
    rc = lc ? ct_copy_to_host(lc, row, (size_t)V * sizeof *row) : -1;
    if (rc == CT_OK) {
      double u = sample_uniform(seed, id, len);
      tok[len++] = pick_token(row, V, temperature, top_k, u, z);
    }
    ct_free(idx), ct_free(logits), ct_free(last), ct_free(lc);
  }
  ct_module_train(g->root, was_training);
  free(row), free(z);
  return rc;
}

// The prompt as tokens into tok (room for strlen(prompt)); "" gives token 0.
static int encode_prompt(const vocab *v, const char *prompt, int64_t *tok, int64_t *len) {
  bytes b = {(char *)prompt, strlen(prompt), 0};
  uint32_t *cp = NULL;
  int64_t n = 0;
  if (utf8_decode("--prompt", &b, &cp, &n) != CT_OK) return -1;
  *len = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t id = vocab_index(v, cp[i]);
    if (id < 0) {
      char u[5] = {0};
      unsigned c = cp[i];
      utf8_encode(c, u);
      free(cp);
      return ct_fail(CT_ERR_VALUE, "ch14: --prompt: the character '%s' (U+%04X) is not in the model's vocabulary "
                     "of %" PRId64 " characters", u, c, v->size);
    }
    tok[(*len)++] = id;
  }
  free(cp);
  if (*len == 0) tok[(*len)++] = 0;
  return CT_OK;
}

// A sample of n characters after the prompt, as UTF-8 into out.
static int sample_text(gpt *g, const vocab *v, const char *prompt, int64_t n, double temperature, int64_t top_k,
                       uint64_t seed, int64_t id, bytes *out) {
  int64_t *tok = malloc((strlen(prompt) + 1 + (size_t)n) * sizeof *tok), len = 0;
  if (!tok) return ct_fail(CT_ERR_OOM, "ch14: out of host memory");
  int rc = encode_prompt(v, prompt, tok, &len);
  if (rc == CT_OK) rc = generate(g, tok, len, n, temperature, top_k, seed, id);
  if (rc == CT_OK) rc = vocab_decode(v, tok, len + n, out);
  free(tok);
  return rc;
}

/*md
::: zh
## 训练循环

每一步：按步数从训练集抽 B 个窗口，`train_step`，读出损失。每 `log_interval` 步打印一行：步数、这一步的损失、学习率、梯度范数（裁剪之前）、这段时间每秒处理的 token 数。每 `eval_interval` 步（以及第 0 步和最后）评估一次训练集和验证集的损失，再用当时的模型写一段样本：第 0 步的样本是随机字符，之后逐渐有了这份语料的样子。

Ctrl-C 和 `--resume` 沿用第 6 章的做法：第一次 Ctrl-C 让循环在当前这一步结束后停下；有 `--save FILE` 时写一个可续训的检查点（模型、AdamW 的状态、生成器、步数，以及本章加的运行参数和字符表），退出码 130（SIGTERM 同样处理，退出码 143）。`--resume FILE` 把它们装回去，从下一步接着训练。窗口的起点只取决于步数，所以续训的每一步损失和不中断的训练逐位相同（`chapter.ch14_resume`）。
:::
::: en
## The training loop

Each step: B windows drawn from the training split by step number, `train_step`, the loss read. Every `log_interval` steps a line: the step, its loss, the learning rate, the gradient norm (before clipping), and the tokens per second since the last line. Every `eval_interval` steps (and at step 0 and at the end) the loss on the train and val splits is estimated and the model of the moment writes a sample: at step 0 random characters, later more and more the look of the corpus.

Ctrl-C and `--resume` work as in chapter 6: the first Ctrl-C stops the loop after the current step; with `--save FILE` a resumable checkpoint is written (the model, AdamW's state, the generators, the step, and this chapter's run settings and vocabulary), exit status 130 (SIGTERM is handled the same way, exit status 143). `--resume FILE` puts it all back and training goes on from the next step. Window starts depend only on the step, so each step's loss of the resumed run is bit-identical to the uninterrupted run's (`chapter.ch14_resume`).
:::
*/
typedef struct history {
  int64_t first_step, steps;            // where this process started; steps it ran
  double step_loss[STEP_LOSSES];        // its first steps' losses
  int n_step_loss;
  double eval_step[MAX_EVALS], eval_train[MAX_EVALS], eval_val[MAX_EVALS];
  int n_eval;
  bytes first_sample, last_sample;      // at the first and the last eval point
  double train_seconds;                 // training steps only
  int64_t tokens;                       // trained on, all ranks
  double steady_seconds;                // the same after this process's first WARM_STEPS steps
  int64_t steady_tokens;
  size_t mem_before, mem_peak;          // a step's start and its peak (bytes allocated)
  bool interrupted;
} history;

static const char *default_prompt(const vocab *v) { return vocab_index(v, '\n') >= 0 ? "\n" : ""; }

// The eval point at step `it`: both losses and a sample, printed and kept.
static int eval_point(trainer *t, const corpus *c, history *h, int64_t it) {
  const settings *s = t->s;
  double tl = NAN, vl = NAN;
  if (estimate_loss(t, c, false, s->eval_iters, &tl) != CT_OK || estimate_loss(t, c, true, s->eval_iters, &vl) != CT_OK)
    return -1;
  bytes text = {0};
  if (sample_text(t->g, &c->voc, default_prompt(&c->voc), s->sample_len, s->temperature, s->top_k, s->seed, it,
                  &text) != CT_OK)
    return -1;
  printf("step %5" PRId64 ": train loss %.4f, val loss %.4f; sample:\n", it, tl, vl);
  for (char *line = text.p, *end; line && *line; line = end ? end + 1 : NULL) { // indented, line by line
    end = strchr(line, '\n');
    printf("    | %.*s\n", end ? (int)(end - line) : (int)strlen(line), line);
  }
  fflush(stdout);
  if (h->n_eval < MAX_EVALS) {
    h->eval_step[h->n_eval] = (double)it, h->eval_train[h->n_eval] = tl, h->eval_val[h->n_eval] = vl;
    h->n_eval++;
  }
  bytes *keep = h->first_sample.p ? &h->last_sample : &h->first_sample;
  free(keep->p);
  *keep = text;
  return CT_OK;
}

static int train(trainer *t, const corpus *c, history *h, ct_profiler **prof, const char *profile_path) {
  const settings *s = t->s;
  const int64_t B = s->batch_size, T = s->block_size;
  int64_t *starts = malloc((size_t)B * sizeof *starts);
  if (!starts) return ct_fail(CT_ERR_OOM, "ch14: out of host memory");
  int rc = CT_OK;
  double sec_log = 0; // since the last log line
  int64_t tok_log = 0, steps_log = 0;
  bool prof_open = false;
  ct_progress *bar = ct_progress_start_label(NULL, "steps", s->max_iters - h->first_step); // a terminal's only
  for (int64_t it = h->first_step; it <= s->max_iters && rc == CT_OK; ++it) {
    if (it % s->eval_interval == 0 || it == s->max_iters) ct_progress_erase(bar);
    if ((it % s->eval_interval == 0 || it == s->max_iters) && (rc = eval_point(t, c, h, it)) != CT_OK) break;
    if (it == s->max_iters) break;
    const int64_t k = it - h->first_step;
    if (profile_path && k == 2) { // torch.profiler.profile(schedule=schedule(warmup=1, active=3))
      ct_profiler_options o = ct_profiler_defaults();
      o.profile_memory = true;
      o.schedule = (ct_profiler_schedule){.warmup = 1, .active = 3, .repeat = 1};
      if (!(*prof = ct_profiler_start(&o))) rc = -1;
      prof_open = rc == CT_OK;
    }
    double t0 = ct_cli_seconds(), loss_v = NAN, norm = NAN;
    ct_tensor *x = NULL, *y = NULL, *loss = NULL;
    if (k == 1) ct_reset_peak_memory_stats(t->dev), h->mem_before = ct_memory_allocated(t->dev);
    if (rc == CT_OK) rc = draw_batch(c, false, s->seed, TAG_TRAIN, it, t->rank, B, T, t->dev, &x, &y, starts);
    if (rc == CT_OK) loss = train_step(t, x, y, it, k, &norm);
    if (rc == CT_OK && loss && t->pg) rc = ct_dist_all_reduce(t->pg, loss, CT_REDUCE_AVG); // the global batch's loss
    if (rc == CT_OK) rc = loss ? ct_item(loss, &loss_v) : -1; // loss.item(): waits for the step
    if (k == 1) h->mem_peak = ct_max_memory_allocated(t->dev);
    ct_free(x), ct_free(y), ct_free(loss);
    if (rc != CT_OK) break;
    const double dt = ct_cli_seconds() - t0;
    ct_cli_check_loss(t->cli, loss_v, it, it, get_lr(s, it)); // NaN/inf: say where, exit 1
    if (prof_open && (rc = ct_profiler_step(*prof)) != CT_OK) break; // prof.step()
    if (prof_open && k == 5) prof_open = false, rc = ct_profiler_stop(*prof);
    if (rc != CT_OK) break;
    h->steps++, h->train_seconds += dt, sec_log += dt, steps_log++;
    h->tokens += B * T * t->world, tok_log += B * T * t->world;
    if (k >= WARM_STEPS) h->steady_seconds += dt, h->steady_tokens += B * T * t->world;
    if (h->n_step_loss < STEP_LOSSES) h->step_loss[h->n_step_loss++] = loss_v;
    ct_progress_step(bar, loss_v, B * t->world); // samples: windows of T tokens
    if (it % s->log_interval == 0 || it == s->max_iters - 1) {
      ct_progress_erase(bar);
      printf("step %5" PRId64 " | loss %.4f | lr %.3e | norm %.3f | %7.0f tok/s | %6.1f ms/step\n", it, loss_v,
             get_lr(s, it), norm, (double)tok_log / sec_log, 1e3 * sec_log / (double)steps_log);
      fflush(stdout);
      sec_log = 0, tok_log = 0, steps_log = 0;
    }
    if (ct_cli_interrupted()) { // Ctrl-C: stop after this whole step
      h->interrupted = true, h->first_step = it + 1;
      break;
    }
  }
  ct_progress_clear(bar);
  if (prof_open && ct_profiler_stop(*prof) != CT_OK) rc = -1; // a run shorter than the window
  free(starts);
  return rc;
}
/*md output train*/
/*md
::: zh
{{fig loss}} 画出每个评估点在训练集和验证集上估计的损失：第 0 步在 ln V 附近（均匀猜测），两条线分开的地方就是开始过拟合的地方。
:::
::: en
{{fig loss}} plots the loss estimated on the training and the validation split at each eval point: step 0 sits near ln V (the uniform guess), and where the two lines part is where overfitting begins.
:::
*/
/*md figure loss*/

/*md
::: zh
在本书构建时的这次运行里，第 0 步的损失是 {{metric step_losses[0] %.3f}}，几乎正好是 ln V = {{metric chance_loss %.3f}}：GPT-2 的初始化让最初的 logits 都接近 0，模型对所有字符一视同仁。最后一次评估的验证损失是 {{metric final_val_loss %.3f}}。样本的变化比数字更直观：第 0 步是字符表里随机抽的字符，几百步之后先学会空格和换行的频率，再学会常见的短词和标点的位置。

完整的默认运行（1000 步）太长，不适合每次构建本书时都跑，它在 CPU 上录制过，和上面的运行并排显示：{{recorded @run}}，语料 {{recorded corpus}}，验证损失降到 {{recorded final_val_loss %.2f}}，每秒 {{recorded tokens_per_s %.0f}} 个 token。中文语料只有约四万字、两千多个不同的字：训练损失一直降，验证损失却在一两百步之后掉头向上，越训练越高。模型在背诗：它写出的标题、作者和句式都像模像样，验证集上没见过的诗它却越来越猜不中。用 `--max-iters 200` 停在验证损失最低的地方，或者换更大的语料（`--corpus FILE`），都是办法。
:::
::: en
In the run made when this book was built, step 0's loss was {{metric step_losses[0] %.3f}}, almost exactly ln V = {{metric chance_loss %.3f}}: GPT-2's initialization makes the first logits all close to 0, and the model treats every character alike. The last validation loss was {{metric final_val_loss %.3f}}. The samples show the change better than the numbers: at step 0 they are random characters of the vocabulary; a few hundred steps later the model has learned how often spaces and line breaks come, then common short words and where punctuation goes.

The full default run (1000 steps) is too long to repeat at every build of this book; it was recorded on a CPU and is shown beside the run above: {{recorded @run}}, corpus {{recorded corpus}}, down to a validation loss of {{recorded final_val_loss %.2f}} at {{recorded tokens_per_s %.0f}} tokens per second. The Chinese corpus has only about forty thousand characters, over two thousand of them distinct: the training loss keeps falling while the validation loss turns around after a couple of hundred steps and climbs for the rest of the run. The model is learning the poems by heart: its titles, authors and line shapes look the part, while the poems of the validation split, which it never saw, get harder and harder for it to predict. Stopping where the validation loss is lowest (`--max-iters 200`) or a larger corpus (`--corpus FILE`) are the ways out.
:::
*/
/*md bookrun --max-iters 300 --eval-interval 50 --profile ch14_trace.json*/
/*md bookrun-zh --corpus zh*/

/*md
::: zh
训练结束后的样本：先按 `--temperature`（默认 0.8）和 `--top-k`（默认 200）抽样，再用温度 0 贪心地写一段。贪心解码每一步都取最可能的字符，对这么小的模型，它很快就落进一个循环（同一个短语、一串空格或一串"，"反复出现）：最可能的下一个字符，往往就是把刚才那一小段再来一遍。抽样让低概率的字符也有机会出现，文字才有变化；温度越高越乱，越低越接近贪心。
:::
::: en
The samples after training: one drawn with `--temperature` (0.8 by default) and `--top-k` (200 by default), then one written greedily at temperature 0. Greedy decoding takes the most likely character every time, and a model this small soon falls into a loop (one phrase, a run of spaces or of commas, over and over): the most likely next character is often the one that repeats the last few. Sampling gives less likely characters their chance and the text varies; the higher the temperature the wilder, the lower the closer to greedy.
:::
*/
static void show_sample(trainer *t, const corpus *c, ct_metrics *m) {
  const settings *s = t->s;
  ct_cli_section("sample");
  bytes sampled = {0}, greedy = {0};
  const char *prompt = s->prompt ? s->prompt : default_prompt(&c->voc);
  if (sample_text(t->g, &c->voc, prompt, 2 * s->sample_len, s->temperature, s->top_k, s->seed, -1, &sampled) != CT_OK ||
      sample_text(t->g, &c->voc, prompt, s->sample_len, 0.0, 0, s->seed, -1, &greedy) != CT_OK)
    ct_cli_die(t->cli);
  printf("temperature %g, top-k %ld, seed %llu:\n%s\n", s->temperature, s->top_k, (unsigned long long)s->seed,
         sampled.p);
  printf("-- greedy (temperature 0: the most likely character every time):\n%s\n", greedy.p);
  ct_metrics_str(m, "sample_final", sampled.p);
  ct_metrics_str(m, "sample_greedy", greedy.p);
  free(sampled.p), free(greedy.p);
  // The sampling rule on fixed logits (temperature 0.5, top-k 3) at four values of u.
  const float ex[4] = {2, 1, 0, -1};
  const double us[4] = {0.1, 0.9, 0.99, 0.999};
  double z[8], picked[4];
  for (int i = 0; i < 4; ++i) picked[i] = (double)pick_token(ex, 4, 0.5, 3, us[i], z);
  ct_metrics_series(m, "pick_token_example", picked, 4);
}
/*md output sample*/

/*md
::: zh
## 内存：每个 token 占多少

一步训练的内存有两部分。一部分和 batch 无关：参数、梯度、AdamW 的两个矩（各和参数一样大），每个参数 4×4 = 16 字节。另一部分和 batch 里的 token 数成正比：前向为反向保存的激活。每个块每个 token 保存大约 16C + n_head·T + 4 个 float：LayerNorm 的输入和两个统计量（两次）、各 Linear 的输入（c_attn、c_proj、c_fc、mlp.c_proj：C、C、C、4C）、q/k/v（3C）、注意力概率 P 的一行（每个头 T 个）、GELU 的输入（4C）；最后还有 logits 和它的梯度，每个 token 各 V 个。`show_memory` 把这个估算和分配器量到的峰值（`ct_max_memory_allocated`：GPU 上是 `torch.cuda.max_memory_allocated`，CPU 上是同一个缓存分配器的统计）并排打印。注意力概率那一项随 T 平方增长（每个 token n_head·T 个），这就是 FlashAttention 不保存 P、在反向时重算它的原因。
:::
::: en
## Memory: what a token costs

A training step's memory has two parts. One does not depend on the batch: the parameters, their gradients and AdamW's two moments (each the size of the parameters), 4×4 = 16 bytes per parameter. The other grows with the tokens in the batch: the activations the forward keeps for the backward. Each block keeps about 16C + n_head·T + 4 floats per token: a LayerNorm's input and two statistics (twice), the inputs of the Linears (c_attn, c_proj, c_fc, mlp.c_proj: C, C, C, 4C), q/k/v (3C), a row of the attention probabilities P (T per head), GELU's input (4C); at the end come the logits and their gradient, V each per token. `show_memory` prints that estimate beside the peak the allocator measured (`ct_max_memory_allocated`: `torch.cuda.max_memory_allocated` on a GPU, the same caching allocator's count on the CPU). The attention probabilities grow with T squared (n_head·T per token), which is why FlashAttention keeps no P and recomputes it in backward.
:::
*/
static void show_memory(const trainer *t, const history *h, ct_metrics *m) {
  ct_cli_section("memory");
  const gpt_config *c = &t->g->cfg;
  const double tokens = (double)(t->s->batch_size * t->s->block_size);
  const double np = (double)ct_module_num_elements(t->g->root), f = 4.0; // float32
  const double per_layer = 16.0 * (double)c->n_embd + (double)(c->n_head * c->block_size) + 4.0;
  const double kept = tokens * f * ((double)c->n_layer * per_layer + 2.0 * (double)c->n_embd + 2.0 +
                                    2.0 * (double)c->vocab_size);
  const double fixed = np * f * 4.0; // params, grads, exp_avg, exp_avg_sq
  printf("parameters %.2f MiB, gradients %.2f MiB, AdamW state %.2f MiB (16 bytes per parameter)\n",
         np * f / 1048576.0, np * f / 1048576.0, 2 * np * f / 1048576.0);
  printf("activations kept for backward (computed): %.2f MiB for %.0f tokens = %.0f bytes per token\n",
         kept / 1048576.0, tokens, kept / tokens);
  printf("computed total: %.2f MiB\n", (fixed + kept) / 1048576.0);
  if (h->mem_peak > 0) {
    printf("measured on %s: allocated at a step's start %.2f MiB, peak during the step %.2f MiB "
           "(max_memory_allocated) = %.0f bytes per token of the batch\n",
           t->dev.type == CT_CUDA ? "the GPU" : "the CPU (the caching allocator)", (double)h->mem_before / 1048576.0,
           (double)h->mem_peak / 1048576.0, (double)h->mem_peak / tokens);
  } else {
    printf("measured: nothing (the run trained fewer than 2 steps)\n");
  }
  ct_metrics_num(m, "mem_params_bytes", np * f);
  ct_metrics_num(m, "mem_fixed_bytes", fixed);
  ct_metrics_num(m, "mem_activation_bytes_computed", kept);
  ct_metrics_num(m, "mem_activation_bytes_per_token", kept / tokens);
  ct_metrics_num(m, "mem_peak_bytes", (double)h->mem_peak);
  ct_metrics_num(m, "mem_step_start_bytes", (double)h->mem_before);
  ct_metrics_num(m, "mem_peak_bytes_per_token", (double)h->mem_peak / tokens);
}
/*md output memory*/

/*md
::: zh
这次运行里，估算的激活是每个 token {{metric mem_activation_bytes_per_token %.0f}} 字节，分配器量到的峰值折合每个 token {{metric mem_peak_bytes_per_token %.0f}} 字节（包括参数、梯度、AdamW 状态和反向时的临时张量）。一步开始时已经占用的内存比参数加 AdamW 状态多：运行时的模块在下一次前向之前一直拿着上一次前向保存的张量，而 PyTorch 在 `backward()` 结束时就释放计算图。
:::
::: en
In this run the estimate is {{metric mem_activation_bytes_per_token %.0f}} bytes of activations per token, and the allocator's measured peak comes to {{metric mem_peak_bytes_per_token %.0f}} bytes per token (parameters, gradients, AdamW's state and backward's temporaries included). The memory in use at the start of a step is more than the parameters and AdamW's state: the runtime's modules hold what the last forward saved until the next forward, where PyTorch frees its graph at the end of `backward()`.
:::
*/

static void show_throughput(const trainer *t, const history *h, ct_metrics *m) {
  ct_cli_section("throughput");
  double tps = h->train_seconds > 0 ? (double)h->tokens / h->train_seconds : NAN;
  double steady = h->steady_seconds > 0 ? (double)h->steady_tokens / h->steady_seconds : tps;
  printf("trained %" PRId64 " steps, %" PRId64 " tokens in %.1f s: %.0f tokens/s, %.1f ms/step "
         "(%d process%s, %d CPU threads each%s%s)\n", h->steps, h->tokens, h->train_seconds, tps,
         h->steps ? 1e3 * h->train_seconds / (double)h->steps : NAN, t->world, t->world > 1 ? "es" : "",
         ct_cli_threads(), t->amp == CT_F32 ? "" : t->amp == CT_BF16 ? ", autocast bf16" : ", autocast fp16",
         t->graph ? ", CUDA graph" : "");
  printf("after the first %d steps: %.0f tokens/s\n", WARM_STEPS, steady);
  ct_metrics_num(m, "tokens_per_s", tps);
  ct_metrics_num(m, "tokens_per_s_steady", steady);
  ct_metrics_num(m, "train_seconds", h->train_seconds);
  ct_metrics_num(m, "steps", (double)h->steps);
  ct_metrics_num(m, "threads", ct_cli_threads());
}
/*md output throughput*/

// The matrix-product FLOPs one training token costs, counted exactly rather
// than with the 6 x parameters rule: per block the four linear layers
// (c_attn C->3C, c_proj C->C, c_fc C->4C, mlp.c_proj 4C->C: 24 C^2 per token
// at 2 FLOPs a multiply-add) and attention's two products (S = q k^T and P v,
// each 2 T C per token over all heads, the whole T x T square as the runtime
// computes it, the masked half included), then lm_head (2 C V). Backward
// costs twice the forward: each product's two gradients, all of them needed
// (the first layer's input gradient reaches the embeddings). LayerNorm, GELU,
// softmax, the loss and AdamW are not products.
static double model_flops_per_token(const gpt_config *c) {
  double C = (double)c->n_embd, T = (double)c->block_size, V = (double)c->vocab_size;
  return 3 * ((double)c->n_layer * (24 * C * C + 4 * T * C) + 2 * C * V);
}

// The model's FLOP rate after the warm-up steps against the ceiling ct_mm
// reaches here now, one process's ceiling times the processes (each has its
// share of the threads).
static void show_ceiling(const trainer *t, const history *h, ct_metrics *m) {
  if (h->steady_seconds <= 0) return; // --generate, or too few steps
  double flops = model_flops_per_token(&t->g->cfg), tps = (double)h->steady_tokens / h->steady_seconds;
  int64_t n = 0;
  double ceiling = t->world * ct_cli_matmul_gflops(t->dev, &n), gflops = flops * tps * 1e-9;
  printf("model: %.2f MFLOP of matrix products per training token", flops * 1e-6);
  ct_metrics_num(m, "model_flops_per_token", flops);
  ct_metrics_print(m, "model_gflops_per_s", ": %.1f GFLOP/s after the first %d steps\n", gflops, WARM_STEPS);
  ct_metrics_print(m, "matmul_ceiling_gflops", "ceiling: %.1f GFLOP/s (ct_mm, %" PRId64 "x%" PRId64 " float32, measured now%s)",
                   ceiling, n, n, t->world > 1 ? ", times the processes" : "");
  ct_metrics_print(m, "ceiling_fraction", "; the model reaches %.2f of it\n", gflops / ceiling);
}

/*md
::: zh
## 时间花在哪里：`--profile`

`--profile FILE` 用第 11 章的分析器记录训练的第 3 到第 6 步（前两步是模型自己的预热，不分析；分析器先“预热”1 步，跟踪但丢掉结果，去掉它自己启动时的偏差，再记录 3 步），打印 `key_averages` 表（按自身时间排序），并把时间线写成 Chrome trace（在 Perfetto 或 `chrome://tracing` 里打开）。孪生程序 `ch14_pytorch.py --profile FILE` 用 `torch.profiler` 记录同样的几步（`schedule(wait=2, warmup=1, active=3)`），打印它的 `key_averages` 表并写出它的 Chrome trace，两份可以并排比较。在 {{recorded @run}} 里，最热的一行是 {{recorded profile_top_op}}，占记录下的 CPU 时间的 {{recorded profile_top_share %.2f}}：c_attn、c_proj、c_fc、mlp.c_proj 和 lm_head 的前向与反向，以及注意力里的两个批量矩阵乘法。GPT 自己的核函数也记录为算子，名字和 PyTorch 分析器里的 `aten::` 算子一样：`ct::embedding`、`ct::native_layer_norm`、`ct::gelu`、注意力的 `ct::_softmax` 和交叉熵 `ct::cross_entropy`，以及它们的反向（表只打印最热的几行，trace 里是全部）。GELU 是逐元素的运算：在 CPU 上运行时用 float 计算这里用的 tanh 形式（float64 仍用双精度），其中的 exp 是运行时自己写的、编译器能向量化的版本，每个元素不调用数学库；CUDA 核函数执行的是同一段代码、同样顺序的运算，所以两个设备给出逐位相同的结果。词表很大时（中文语料两千多个字），`lm_head` 和交叉熵占的比例明显上升。
:::
::: en
## Where the time goes: `--profile`

`--profile FILE` records training steps 3 to 6 with chapter 11's profiler (the first two steps, the model's own warm-up, are not profiled; the profiler then "warms up" for one step, tracing and discarding the result to drop its own start-up skew, and records three), prints the `key_averages` table (sorted by self time) and writes the timeline as a Chrome trace (open it in Perfetto or `chrome://tracing`). The twin's `ch14_pytorch.py --profile FILE` records the same steps with `torch.profiler` (`schedule(wait=2, warmup=1, active=3)`), prints its `key_averages` table and writes its Chrome trace, to compare side by side. In {{recorded @run}} the hottest row is {{recorded profile_top_op}}, with {{recorded profile_top_share %.2f}} of the recorded CPU time: c_attn, c_proj, c_fc, mlp.c_proj and lm_head, forward and backward, and attention's two batched products. The GPT's own kernels are recorded as ops too, named as PyTorch's profiler names its `aten::` ops: `ct::embedding`, `ct::native_layer_norm`, `ct::gelu`, attention's `ct::_softmax` and the loss's `ct::cross_entropy`, and their backward ops (the table prints the hottest rows; the trace has them all). GELU is element-wise: on the CPU the runtime computes the tanh form used here in float (float64 stays in double precision) with an exp of its own that the compiler vectorizes, no math-library call per element; the CUDA kernel runs the same code, the same operations in the same order, so the two devices give the same bits. With a large vocabulary (the Chinese corpus has over two thousand characters) `lm_head` and the cross-entropy take a visibly larger share.
:::
*/
static int show_profile(const trainer *t, ct_profiler *p, const char *path, ct_metrics *m) {
  ct_cli_section("profile");
  if (!p) {
    printf("not profiled (--profile FILE records steps 3-6 and writes a Chrome trace to FILE)\n");
    return CT_OK;
  }
  const bool dev = t->dev.type == CT_CUDA;
  ct_profiler_averages *a = ct_profiler_key_averages(p, false);
  char *table = a ? ct_profiler_table(a, dev ? "self_cuda_time_total" : "self_cpu_time_total", 12) : NULL;
  int rc = table ? ct_profiler_export_chrome_trace(p, path) : -1;
  if (rc == CT_OK) {
    printf("%s", table);
    const ct_profiler_row *top = NULL; // the op (ct::...) with the most self time
    for (int i = 0; i < a->n; ++i)
      if (strncmp(a->rows[i].name, "ct::", 4) == 0 &&
          (!top || (dev ? a->rows[i].self_device_us > top->self_device_us : a->rows[i].self_cpu_us > top->self_cpu_us)))
        top = &a->rows[i];
    double total = dev ? a->self_device_total_us : a->self_cpu_total_us;
    if (top) {
      double share = (dev ? top->self_device_us : top->self_cpu_us) / total;
      printf("hottest op: %s, %.0f%% of the recorded %s time\n", top->name, 100 * share, dev ? "device" : "CPU");
      ct_metrics_str(m, "profile_top_op", top->name);
      ct_metrics_num(m, "profile_top_share", share);
    }
    printf("trace: %s\n", path);
  }
  free(table);
  ct_profiler_averages_free(a);
  return rc;
}
/*md output profile*/

/*md
::: zh
## 检查点与 `--generate`

`--save FILE` 在训练结束（或 Ctrl-C）时用 `ct_save_train_checkpoint` 写一个 safetensors 文件：`model.` 开头的是 state_dict（`model.lm_head.weight` 和 `model.transformer.wte.weight` 都在，数据存了两份。`torch.save(model.state_dict())` 不是这样：共享同一块存储的张量它只写一次；拒绝共享张量的是 safetensors 的 `save_file`，它会报错并建议改用 `save_model`（去掉重复的名字）。ct 写两份，这样文件里每个名字都是一个独立、完整的张量，任何 safetensors 读取器都能直接载入），`optimizer.` 开头的是 AdamW 的状态，元数据里有步数、生成器状态，以及本章加的三项：模型的形状（`ch14.model`）、字符表（`ch14.vocab`，就是那些字符本身，UTF-8）和决定训练轨迹的参数（`ch14.config`，续训时必须一致）。

`--generate FILE` 只读这个文件：从元数据建出同样形状的模型，载入权重（`ct_module_load` 认得训练检查点里 `model.` 开头的那部分），用元数据里的字符表把 `--prompt` 编成 token，生成 `--sample-len` 个字符。它不需要语料，也不需要当初的参数。
:::
::: en
## Checkpoints and `--generate`

`--save FILE` writes, at the end of training (or on Ctrl-C), one safetensors file with `ct_save_train_checkpoint`: the state_dict under `model.` (both `model.lm_head.weight` and `model.transformer.wte.weight`, the data stored twice. `torch.save(model.state_dict())` does otherwise: it writes tensors that share one storage once; it is safetensors' `save_file` that refuses shared tensors, with an error pointing to `save_model`, which drops the duplicate names. ct stores the data twice so that every name in the file is a whole tensor of its own that any safetensors reader can load), AdamW's state under `optimizer.`, and in the metadata the step, the generators' states and three entries of this chapter's: the model's shape (`ch14.model`), the vocabulary (`ch14.vocab`, the characters themselves, in UTF-8) and the settings that decide the training's course (`ch14.config`, which a resumed run must match).

`--generate FILE` reads only that file: it builds a model of the shape in the metadata, loads the weights (`ct_module_load` knows the `model.` part of a training checkpoint), encodes `--prompt` with the vocabulary from the metadata and writes `--sample-len` characters. It needs neither the corpus nor the original flags.
:::
*/
static void model_meta(const gpt_config *c, char *out, size_t cap) {
  snprintf(out, cap, "vocab_size=%" PRId64 " block_size=%" PRId64 " n_layer=%" PRId64 " n_head=%" PRId64
           " n_embd=%" PRId64, c->vocab_size, c->block_size, c->n_layer, c->n_head, c->n_embd);
}

// The flags a resumed run must share with the run it continues.
static void run_config(const settings *s, int world, char *out, size_t cap) {
  snprintf(out, cap,
           "corpus=%s n_layer=%ld n_head=%ld n_embd=%ld block_size=%ld batch_size=%ld max_iters=%ld lr=%.17g "
           "min_lr=%.17g warmup_iters=%ld weight_decay=%.17g beta2=%.17g grad_clip=%.17g amp=%s seed=%llu world=%d",
           s->corpus, s->n_layer, s->n_head, s->n_embd, s->block_size, s->batch_size, s->max_iters, s->lr, s->min_lr,
           s->warmup_iters, s->weight_decay, s->beta2, s->grad_clip, s->amp, (unsigned long long)s->seed, world);
}

static int save_checkpoint(trainer *t, const vocab *v, int64_t step, const char *path) {
  char model[256], config[1024];
  model_meta(&t->g->cfg, model, sizeof model);
  run_config(t->s, t->world, config, sizeof config);
  bytes chars = {0};
  if (vocab_utf8(v, &chars) != CT_OK) return -1;
  const char *extra[2 * (3 + CT_GRAD_SCALER_METADATA_KEYS) + 1] = {"ch14.model", model, "ch14.vocab", chars.p,
                                                                   "ch14.config", config};
  ct_grad_scaler_metadata sm;
  if (t->scaler) { // the scale and its growth tracker, so float16 resumes exactly too
    ct_grad_scaler_state st;
    if (ct_grad_scaler_state_dict(t->scaler, &st) != CT_OK) return -1;
    ct_grad_scaler_state_to_metadata(&st, &sm);
    for (int i = 0; sm.pairs[i]; ++i) extra[6 + i] = sm.pairs[i];
  }
  const ct_train_progress p = {.epoch = 0, .batch = step, .step = step};
  int rc = ct_save_train_checkpoint(path, t->g->root, t->opt, &p, extra);
  free(chars.p);
  return rc;
}

// --resume: the model, AdamW, the generators and the step; the settings and
// the vocabulary must be the saved run's.
static void resume(trainer *t, const vocab *v, history *h) {
  const settings *s = t->s;
  char **meta = NULL, config[1024];
  ct_train_progress p;
  if (ct_load_train_checkpoint(s->resume, t->g->root, t->opt, &p, &meta) != CT_OK) {
    ct_status st = ct_last_status();
    char *why = strdup(ct_last_error());
    ct_named_tensor *e = NULL;
    int ne = 0;
    bool init_file = false; // name a --save-init file as such, not as "weights only"
    if (ct_load_safetensors(s->resume, ct_device_cpu(), &e, &ne) == CT_OK)
      for (int i = 0; i < ne; ++i) init_file |= strcmp(e[i].name, "batch_starts") == 0;
    ct_named_tensors_free(e, ne);
    if (init_file) {
      free(why);
      fprintf(stderr, "ch14: --resume %s: a ch14 --save-init file (initial weights and the twin's windows), not a "
              "training checkpoint; resume from the file --save wrote when the run was interrupted\n", s->resume);
      exit(1);
    }
    if (why) ct_fail(st, "%s", why); // the loader's own message
    free(why);
    ct_cli_die(t->cli);
  }
  run_config(s, t->world, config, sizeof config);
  const char *saved = ct_metadata_get(meta, "ch14.config"), *chars = ct_metadata_get(meta, "ch14.vocab");
  bytes mine = {0};
  if (vocab_utf8(v, &mine) != CT_OK) ct_cli_die(t->cli);
  if (!saved || strcmp(saved, config) != 0 || !chars || strcmp(chars, mine.p) != 0) {
    fprintf(stderr, "ch14: --resume %s: the run was saved with settings\n  %s\nand this one has\n  %s\n%s"
            "resume with the same flags\n", s->resume, saved ? saved : "(none: not a ch14 run)", config,
            saved && chars && strcmp(chars, mine.p) != 0 ? "(and the corpus's vocabulary differs)\n" : "");
    exit(1);
  }
  if (t->scaler) {
    ct_grad_scaler_state st;
    if (ct_grad_scaler_state_from_metadata((const char *const *)meta, &st) != CT_OK ||
        ct_grad_scaler_load_state_dict(t->scaler, &st) != CT_OK)
      ct_cli_die(t->cli);
  }
  free(mine.p);
  ct_metadata_free(meta);
  h->first_step = p.step;
  printf("resuming %s at step %" PRId64 "\n", s->resume, p.step);
}

// --save-init FILE: the initial state_dict, the first steps' window starts
// (batch_starts, (init_steps, B) int64) and the vocabulary, for the twin.
static int save_init(trainer *t, const corpus *c, const char *path) {
  const settings *s = t->s;
  const int64_t B = s->batch_size, n = s->init_steps;
  int64_t *starts = malloc((size_t)(n * B + 1) * sizeof *starts);
  if (!starts) return ct_fail(CT_ERR_OOM, "ch14: out of host memory");
  for (int64_t k = 0; k < n; ++k)
    for (int64_t b = 0; b < B; ++b) starts[k * B + b] = window_start(s->seed, TAG_TRAIN, k, b, c->n_train, s->block_size);
  int ne = 0;
  ct_named_tensor *e = ct_module_state_dict(t->g->root, "", &ne);
  ct_named_tensor *all = e ? calloc((size_t)ne + 1, sizeof *all) : NULL;
  int rc = all ? CT_OK : -1;
  if (rc == CT_OK) {
    memcpy(all, e, (size_t)ne * sizeof *all);
    snprintf(all[ne].name, sizeof all[ne].name, "batch_starts");
    all[ne].tensor = ct_from_host(starts, CT_SHAPE(n, B), CT_I64, ct_device_cpu());
    char model[256];
    model_meta(&t->g->cfg, model, sizeof model);
    bytes chars = {0};
    rc = vocab_utf8(&c->voc, &chars);
    const char *meta[] = {"ch14.model", model, "ch14.vocab", chars.p ? chars.p : "", NULL};
    if (rc == CT_OK) rc = all[ne].tensor ? ct_save_safetensors(path, all, ne + 1, meta) : -1;
    ct_free(all[ne].tensor);
    free(chars.p);
  }
  free(all);
  if (e) ct_named_tensors_free(e, ne);
  free(starts);
  return rc;
}

static void show_checkpoint(trainer *t, const vocab *v, const history *h, ct_metrics *m) {
  const settings *s = t->s;
  ct_cli_section("checkpoint");
  if (s->save_init) printf("initial weights and the first %ld steps' windows were saved to %s\n", s->init_steps,
                           s->save_init);
  if (!s->save) {
    printf("not saved (pass --save FILE; then --generate FILE samples from it, --resume FILE continues it)\n");
    return;
  }
  if (t->rank == 0 && save_checkpoint(t, v, h->first_step + h->steps, s->save) != CT_OK) ct_cli_die(t->cli);
  printf("saved %s at step %" PRId64 ": model, AdamW state, generators, vocabulary (written atomically)\n", s->save,
         h->first_step + h->steps);
  ct_metrics_str(m, "checkpoint", s->save);
}
/*md output checkpoint*/

// Ctrl-C stopped training: save what --resume needs, exit 130.
static _Noreturn void stop_interrupted(trainer *t, const vocab *v, const history *h) {
  printf("interrupted after step %" PRId64 "\n", h->first_step - 1);
  if (!t->s->save) {
    printf("nothing saved: pass --save FILE to keep a run that Ctrl-C stops, then --resume FILE\n");
  } else if (t->rank == 0) {
    if (save_checkpoint(t, v, h->first_step, t->s->save) != CT_OK) ct_cli_die(t->cli);
    printf("saved %s: continue with --resume %s and the same flags\n", t->s->save, t->s->save);
  }
  fflush(stdout);
  exit(ct_cli_interrupt_status()); // 130 after Ctrl-C, 143 after SIGTERM
}

// --generate FILE: sample from a saved checkpoint, nothing else.
static void run_generate(const settings *s, const ct_cli *cli, ct_metrics *m) {
  ct_cli_section("generate");
  ct_named_tensor *e = NULL;
  char **meta = NULL;
  int ne = 0;
  if (ct_load_safetensors_with_metadata(s->generate, ct_device_cpu(), &e, &ne, &meta) != CT_OK) ct_cli_die(cli);
  bool init_file = false; // a --save-init file: initial weights and the twin's windows
  for (int i = 0; i < ne; ++i) init_file |= strcmp(e[i].name, "batch_starts") == 0;
  ct_named_tensors_free(e, ne);
  if (init_file) {
    fprintf(stderr, "ch14: --generate %s: a ch14 --save-init file (untrained initial weights and the twin's "
            "windows), not a checkpoint of a trained model; train with --save FILE and generate from FILE\n",
            s->generate);
    exit(1);
  }
  const char *model = ct_metadata_get(meta, "ch14.model"), *chars = ct_metadata_get(meta, "ch14.vocab");
  gpt_config c = {0};
  if (!model || !chars ||
      sscanf(model, "vocab_size=%" SCNd64 " block_size=%" SCNd64 " n_layer=%" SCNd64 " n_head=%" SCNd64
             " n_embd=%" SCNd64, &c.vocab_size, &c.block_size, &c.n_layer, &c.n_head, &c.n_embd) != 5) {
    fprintf(stderr, "ch14: --generate %s: not a ch14 checkpoint (its metadata has no ch14.model and ch14.vocab); "
            "train with --save FILE first\n", s->generate);
    exit(1);
  }
  vocab v = {0};
  bytes b = {(char *)chars, strlen(chars), 0};
  int64_t n = 0;
  if (utf8_decode(s->generate, &b, &v.chars, &n) != CT_OK) ct_cli_die(cli);
  v.size = n;
  if (v.size != c.vocab_size) {
    fprintf(stderr, "ch14: --generate %s: its vocabulary has %" PRId64 " characters, its model %" PRId64 "\n",
            s->generate, v.size, c.vocab_size);
    exit(1);
  }
  gpt g;
  if (gpt_build(&g, c, cli->device) != CT_OK || ct_module_load(g.root, s->generate) != CT_OK) ct_cli_die(cli);
  ct_metadata_free(meta);
  bytes text = {0};
  if (sample_text(&g, &v, s->prompt ? s->prompt : default_prompt(&v), s->sample_len, s->temperature, s->top_k,
                  s->seed, -1, &text) != CT_OK)
    ct_cli_die(cli);
  printf("%s: %" PRId64 " parameters; temperature %g, top-k %ld, seed %llu\n%s\n", s->generate,
         ct_module_num_elements(g.root), s->temperature, s->top_k, (unsigned long long)s->seed, text.p);
  ct_metrics_str(m, "sample_generate", text.p);
  free(text.p);
  free(v.chars);
  gpt_free(&g);
}

/*md
::: zh
## 前面各章在这里变成了什么

| 章 | 那一章造的东西 | 在本章 |
|--|-----------|-----------------|
| [1](chapter:ch01) | 设备查询、`--device` | 第一行 `device: ...`；没有 GPU 时在 CPU 上照样跑 |
| [2](chapter:ch02) | 张量在设备间搬运 | 每步的窗口 `ct_from_host` 到设备；生成时每个字符的 logits 拷回主机 |
| [3](chapter:ch03) | 缓存分配器、显存统计 | "内存"一节的 `ct_max_memory_allocated`：每个 token 多少字节 |
| [4](chapter:ch04) | 矩阵乘法（OpenBLAS、cuBLAS） | 几乎所有时间：c_attn、c_proj、c_fc、lm_head 和注意力里的批量 GEMM |
| [5](chapter:ch05) | 损失的梯度、手写反向 | `ct_cross_entropy` 给出 dL/dlogits；`gpt_backward` 把整个网络的反向写出来 |
| [6](chapter:ch06) | 训练循环、检查点、Ctrl-C 与 `--resume` | `--save`、`--resume`（逐位相同）、`--generate` 读同一种检查点 |
| [7](chapter:ch07) | DataParallel 的梯度求和 | 多个进程时的 `ct_ddp_allreduce_grads` 是同一件事跨进程做 |
| [8](chapter:ch08) | DDP 与 `tools/launch` | `tools/launch --nproc-per-node 2 ./ch14`：两个进程各算一半窗口，梯度取平均，和一个进程算整个 batch 相同 |
| [9](chapter:ch09) | autocast 与 GradScaler | `--amp bf16` / `--amp fp16`：前向在低精度里算，fp16 用 GradScaler，裁剪之前 `unscale_` |
| [10](chapter:ch10) | CUDA Graphs | `--graphs`：前向加反向录一次、之后每步重放 |
| [11](chapter:ch11) | 性能分析器 | `--profile FILE`：`key_averages` 表和 Chrome trace |
| [12](chapter:ch12) | 流与事件 | `--graphs` 的预热和捕获在旁路流上，主流用 `wait_stream` 等它 |
| [13](chapter:ch13) | 运行时编译的融合核函数 | 本章没有用：GELU、LayerNorm、softmax 已经是手写的融合核函数；练习可以把 MLP 的偏置加 GELU 换成一个 JIT 核函数 |

`--amp` 靠每个 Transformer 层都能在 autocast 下运行：Linear 和注意力的两个矩阵乘法在 bfloat16 或 float16 里算，LayerNorm、注意力的 softmax 和交叉熵在 float32 里算；参数和梯度一直是 float32。这是 PyTorch 在 **CUDA** 上的规则（AutocastCUDA 的列表）。PyTorch 2.x 在 CPU 上的列表（AutocastCPU）不同：交叉熵仍在 float32 里算，注意力（`scaled_dot_product_attention`）同样在低精度里算，但 softmax 和 layer_norm 不在 float32 列表上，bfloat16 输入就在 bfloat16 里算（LayerNorm 的参数仍是 float32）。ct 和 PyTorch 一样按设备选列表（[第 9 章](chapter:ch09)讲两张列表）：`--amp bf16 --device cpu` 时 softmax 和 LayerNorm 跟着输入走。本模型的 LayerNorm 都接在残差和后面，输入是 float32，输出仍是 float32；变的只有注意力的概率 P：CPU 上它是 bfloat16（CUDA 上是 float32，乘 v 之前再转成 bfloat16）。前向的数因此不变（P 反正要舍入成 bfloat16 才和 v 相乘），反向的 softmax 从舍入过的 P 算起，和 PyTorch 的 CPU autocast 一样；P 存成 bfloat16，占的内存减半。PyTorch 1.13 在 CPU 上的 softmax 规则与此相同。
:::
::: en
## What the earlier chapters became here

| ch. | what that chapter built | in this chapter |
|--|-----------|-----------------|
| [1](chapter:ch01) | device query, `--device` | the first line, `device: ...`; without a GPU it runs on the CPU all the same |
| [2](chapter:ch02) | moving tensors between devices | each step's windows go to the device with `ct_from_host`; in generation each character's logits come back to the host |
| [3](chapter:ch03) | the caching allocator, memory statistics | the memory section's `ct_max_memory_allocated`: bytes per token |
| [4](chapter:ch04) | matrix products (OpenBLAS, cuBLAS) | nearly all the time: c_attn, c_proj, c_fc, lm_head and attention's batched GEMMs |
| [5](chapter:ch05) | a loss's gradient, backward by hand | `ct_cross_entropy` gives dL/dlogits; `gpt_backward` writes out the whole network's backward |
| [6](chapter:ch06) | the training loop, checkpoints, Ctrl-C and `--resume` | `--save`, `--resume` (bit-identical), `--generate` reading the same kind of checkpoint |
| [7](chapter:ch07) | DataParallel's gradient sum | with several processes `ct_ddp_allreduce_grads` is the same thing across processes |
| [8](chapter:ch08) | DDP and `tools/launch` | `tools/launch --nproc-per-node 2 ./ch14`: two processes take half the windows each, average their gradients, and match one process taking the whole batch |
| [9](chapter:ch09) | autocast and GradScaler | `--amp bf16` / `--amp fp16`: the forward in low precision, GradScaler for fp16, `unscale_` before clipping |
| [10](chapter:ch10) | CUDA graphs | `--graphs`: forward and backward captured once, replayed each step |
| [11](chapter:ch11) | the profiler | `--profile FILE`: the `key_averages` table and a Chrome trace |
| [12](chapter:ch12) | streams and events | `--graphs` warms up and captures on a side stream, which the main stream waits for with `wait_stream` |
| [13](chapter:ch13) | runtime-compiled fused kernels | not used: GELU, LayerNorm and the softmax are hand-written fused kernels already; an exercise could replace the MLP's bias-plus-GELU with one JIT kernel |

`--amp` relies on every transformer layer running under autocast: the Linears and attention's two matrix products compute in bfloat16 or float16, LayerNorm, attention's softmax and the cross-entropy in float32; parameters and gradients stay float32. Those are PyTorch's rules on **CUDA** (AutocastCUDA's lists). PyTorch 2.x's CPU lists (AutocastCPU) differ: the cross-entropy is still computed in float32 and attention (`scaled_dot_product_attention`) in the lower precision, but softmax and layer_norm are on no float32 list, so a bfloat16 input is computed in bfloat16 (LayerNorm's parameters staying float32). ct picks the lists by device as PyTorch does ([chapter 9](chapter:ch09) explains both): with `--amp bf16 --device cpu` softmax and LayerNorm follow their input. In this model every LayerNorm follows a residual sum, whose float32 keeps it float32; what changes is attention's probabilities P: bfloat16 on the CPU (float32 on CUDA, cast to bfloat16 before the product with v). The forward's numbers do not change (P is rounded to bfloat16 for that product either way); the backward's softmax starts from the rounded P, as PyTorch's CPU autocast does, and P takes half the memory. PyTorch 1.13's CPU softmax rule is the same.
:::
*/

/*md
::: zh
## main：大小、预设和各章的开关

三个预设：`--quick`（2 层、宽 32，几十步，测试和 Valgrind 用，几秒钟）；默认的 `--preset cpu`（在 2 核 CPU 上几分钟训练出明显像样的文本）；`--preset gpu`（6 层、6 个头、宽 384、上下文 256、batch 64，nanoGPT 的 shakespeare-char 规模，给一块 H100）。任何一个尺寸都可以用对应的开关单独改（`--n-layer`、`--n-embd`……）。
:::
::: en
## main: sizes, presets and the earlier chapters' flags

Three presets: `--quick` (2 layers, width 32, tens of steps: for tests and Valgrind, seconds); the default `--preset cpu` (minutes on a 2-core CPU to visibly decent text); `--preset gpu` (6 layers, 6 heads, width 384, context 256, batch 64: nanoGPT's shakespeare-char scale, for an H100). Each size has its own flag too (`--n-layer`, `--n-embd`, ...).
:::
*/
typedef struct preset {
  const char *name;
  long n_layer, n_head, n_embd, block_size, batch_size, max_iters, warmup, eval_interval, eval_iters, log_interval,
      sample_len;
  double lr, min_lr;
} preset;

static const preset PRESETS[] = {
    {"quick", 2, 2, 32, 32, 8, 40, 4, 20, 2, 10, 60, 3e-3, 3e-4},
    {"cpu", 4, 4, 128, 64, 32, 1000, 50, 100, 10, 50, 200, 2e-3, 2e-4},
    {"gpu", 6, 6, 384, 256, 64, 5000, 100, 250, 200, 50, 300, 1e-3, 1e-4},
};

// Fills every setting left 0 from the preset.
static void apply_preset(settings *s, const preset *p) {
  long *dst[] = {&s->n_layer, &s->n_head, &s->n_embd, &s->block_size, &s->batch_size, &s->max_iters,
                 &s->eval_interval, &s->eval_iters, &s->log_interval, &s->sample_len};
  const long src[] = {p->n_layer, p->n_head, p->n_embd, p->block_size, p->batch_size, p->max_iters,
                      p->eval_interval, p->eval_iters, p->log_interval, p->sample_len};
  for (size_t i = 0; i < sizeof dst / sizeof dst[0]; ++i)
    if (*dst[i] == 0) *dst[i] = src[i];
  if (s->warmup_iters < 0) s->warmup_iters = p->warmup < s->max_iters ? p->warmup : s->max_iters / 10;
  if (s->lr == 0) s->lr = p->lr;
  if (s->min_lr == 0) s->min_lr = p->min_lr;
}

#define MAX_SAMPLE_LEN 100000 // --sample-len's limit

static const char *check_settings(settings *s) {
  if (s->n_layer < 1 || s->n_head < 1 || s->n_embd < 1 || s->block_size < 1 || s->batch_size < 1 || s->max_iters < 1)
    return "--n-layer, --n-head, --n-embd, --block-size, --batch-size and --max-iters must be >= 1";
  if (s->n_embd % s->n_head) return "--n-embd must be a multiple of --n-head";
  if (s->warmup_iters < 0 || s->warmup_iters >= s->max_iters) return "--warmup-iters must be in [0, --max-iters)";
  if (s->eval_interval < 1 || s->eval_iters < 1 || s->log_interval < 1 || s->sample_len < 0 || s->top_k < 0 ||
      s->init_steps < 1)
    return "--eval-interval, --eval-iters, --log-interval and --init-steps must be >= 1, --sample-len and --top-k >= 0";
  if (s->sample_len > MAX_SAMPLE_LEN) // one forward pass a character: minutes past this on a CPU
    return "--sample-len must be at most 100000 (one forward pass per character)";
  if (!(s->lr > 0) || !(s->min_lr >= 0) || !(s->weight_decay >= 0) || !(s->grad_clip >= 0) ||
      !(s->beta2 >= 0 && s->beta2 < 1) || !(s->temperature >= 0))
    return "--lr must be > 0; --min-lr, --weight-decay, --grad-clip, --temperature >= 0; --beta2 in [0, 1)";
  return NULL;
}

// Several processes: setup (the corpus, the model) fails on one rank only
// when that rank's files or memory differ, and the others would then wait in
// DDP's first broadcast until mpirun killed them. ct_dist_agree makes every
// rank stop together instead, each saying which rank failed and why. One
// process (pg NULL): the failure is printed as it is.
static void agree_or_die(ct_process_group *pg, const ct_cli *cli, int rc) {
  if (!pg) {
    if (rc != CT_OK) ct_cli_die(cli);
    return;
  }
  const char *e = rc != CT_OK ? ct_last_error() : "";
  if (!strncmp(e, "ch14: ", 6)) e += 6; // "ch14: rank 1 failed: ...", not "...failed: ch14: ..."
  if (ct_dist_agree(pg, rc, e) == CT_OK) return;
  ct_dist_destroy_process_group(pg); // leave MPI cleanly, so mpirun adds nothing of its own
  ct_cli_die(cli);
}

// Every rank must train on the same text: a 64-bit FNV-1a hash of the
// vocabulary and the corpus's length, the largest and smallest over the
// ranks (one all-reduce of {h, n, -h, -n} with MAX), must agree.
static void same_corpus_or_die(ct_process_group *pg, const ct_cli *cli, const settings *s, const corpus *c) {
  uint64_t h = 1469598103934665603ULL;
  for (int64_t i = 0; i < c->voc.size; ++i)
    for (int b = 0; b < 4; ++b) h = (h ^ ((c->voc.chars[i] >> (8 * b)) & 0xffu)) * 1099511628211ULL;
  int64_t mine = (int64_t)(h & 0x3fffffffffffffffULL), v[4] = {mine, c->n, -mine, -c->n}, got[4] = {0};
  ct_tensor *t = ct_from_host(v, CT_SHAPE(4), CT_I64, ct_dist_device(pg)); // nccl reduces GPU tensors only
  int rc = t ? ct_dist_all_reduce(pg, t, CT_REDUCE_MAX) : (int)ct_last_status();
  if (rc == CT_OK) rc = ct_copy_to_host(t, got, sizeof got);
  ct_free(t);
  if (rc == CT_OK && (got[0] != -got[2] || got[1] != -got[3]))
    rc = ct_fail(CT_ERR_VALUE, "ch14: the ranks read different texts: --corpus %s gives rank %d %" PRId64
                 " characters and a vocabulary of %" PRId64 ", and another rank has %s; give every rank the same "
                 "--corpus (the same file, with the same contents, on every machine)", s->corpus,
                 ct_dist_get_rank(pg), c->n, c->voc.size,
                 got[1] != -got[3] ? "a different length" : "a different vocabulary");
  if (rc == CT_OK) return;
  ct_dist_destroy_process_group(pg);
  ct_cli_die(cli);
}

int main(int argc, char **argv) {
  ct_cli cli = {.program = "ch14", .summary = "Chapter 14: a character-level GPT trained in C (nanoGPT's model)."};
  settings s = {.corpus = "en", .preset = "cpu", .amp = "off", .weight_decay = 0.1, .beta2 = 0.99, .grad_clip = 1.0,
                .temperature = 0.8, .top_k = 200, .init_steps = 20, .warmup_iters = -1};
  ct_cli_opt opts[] = {
      {"corpus", CT_OPT_STRING, &s.corpus, "zh (fortunes-zh: Tang and Song poems), en (fortunes), or a UTF-8 FILE"},
      {"preset", CT_OPT_STRING, &s.preset, "cpu (minutes on 2 cores) or gpu (nanoGPT's shakespeare-char size)"},
      {"n-layer", CT_OPT_INT, &s.n_layer, "transformer blocks (0: the preset's)"},
      {"n-head", CT_OPT_INT, &s.n_head, "attention heads (0: the preset's)"},
      {"n-embd", CT_OPT_INT, &s.n_embd, "width C (0: the preset's)"},
      {"block-size", CT_OPT_INT, &s.block_size, "context length T (0: the preset's)"},
      {"batch-size", CT_OPT_INT, &s.batch_size, "windows per step, per process (0: the preset's)"},
      {"max-iters", CT_OPT_INT, &s.max_iters, "training steps; the cosine schedule ends there (0: the preset's)"},
      {"lr", CT_OPT_DOUBLE, &s.lr, "peak learning rate (0: the preset's)"},
      {"min-lr", CT_OPT_DOUBLE, &s.min_lr, "learning rate at the end of the cosine (0: the preset's)"},
      {"warmup-iters", CT_OPT_INT, &s.warmup_iters, "linear warm-up steps (-1: the preset's, or a tenth of a shorter run)"},
      {"weight-decay", CT_OPT_DOUBLE, &s.weight_decay, "AdamW's decay of the 2-D weights"},
      {"beta2", CT_OPT_DOUBLE, &s.beta2, "AdamW's beta2"},
      {"grad-clip", CT_OPT_DOUBLE, &s.grad_clip, "clip the global gradient norm to this (0: off)"},
      {"eval-interval", CT_OPT_INT, &s.eval_interval, "steps between evaluations (0: the preset's)"},
      {"eval-iters", CT_OPT_INT, &s.eval_iters, "batches per loss estimate (0: the preset's)"},
      {"log-interval", CT_OPT_INT, &s.log_interval, "steps between log lines (0: the preset's)"},
      {"sample-len", CT_OPT_INT, &s.sample_len, "characters per sample, at most 100000 (0: the preset's)"},
      {"temperature", CT_OPT_DOUBLE, &s.temperature, "sampling temperature (0: greedy)"},
      {"top-k", CT_OPT_INT, &s.top_k, "sample from the k most likely characters (0: all)"},
      {"prompt", CT_OPT_STRING, &s.prompt, "text the final sample and --generate continue (default: a newline)"},
      {"save", CT_OPT_OUTPUT, &s.save, "write a resumable checkpoint to FILE at the end (or on Ctrl-C)"},
      {"resume", CT_OPT_INPUT, &s.resume, "continue the run saved in FILE (same flags)"},
      {"generate", CT_OPT_INPUT, &s.generate, "only sample from the checkpoint FILE"},
      {"save-init", CT_OPT_OUTPUT, &s.save_init, "write the initial weights and first windows to FILE (for the twin)"},
      {"init-steps", CT_OPT_INT, &s.init_steps, "steps of windows --save-init writes"},
      {"amp", CT_OPT_STRING, &s.amp, "off, bf16 or fp16: autocast (and GradScaler for fp16), chapter 9"},
      {"graphs", CT_OPT_FLAG, &s.graphs, "capture forward+backward once and replay it, chapter 10"},
      {"profile", CT_OPT_OUTPUT, &s.profile, "profile steps 3-6 and write a Chrome trace to FILE, chapter 11"},
  };
  ct_cli_parse(&cli, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
  /*md hide*/
  const preset *p = NULL;
  for (size_t i = 1; i < sizeof PRESETS / sizeof PRESETS[0]; ++i)
    if (strcmp(s.preset, PRESETS[i].name) == 0) p = &PRESETS[i];
  const char *bad = NULL;
  if (!p) bad = "--preset expects cpu or gpu";
  else if (strcmp(s.amp, "off") && strcmp(s.amp, "bf16") && strcmp(s.amp, "fp16")) bad = "--amp expects off, bf16 or fp16";
  else if (s.resume && s.generate) bad = "--resume continues training and --generate only samples: give one of them";
  if (!bad) {
    apply_preset(&s, cli.quick ? &PRESETS[0] : p);
    bad = check_settings(&s);
  }
  if (bad) {
    fprintf(stderr, "ch14: %s\nusage: ch14 [--help] ...\n", bad);
    return 2;
  }
  // before anything is allocated (sizes from flags: issue 23): the weights with their grads and
  // AdamW's state, the activations of a step, and the attention matrices
  ct_cli_need_memory(&cli, "--n-layer x --n-embd x --n-embd floats (weights, grads, AdamW state: about 48)", 4,
                     (const int64_t[]){s.n_layer, s.n_embd, s.n_embd, 48}, sizeof(float));
  ct_cli_need_memory(&cli, "--batch-size x --block-size x --n-embd x --n-layer floats (activations: about 16)", 5,
                     (const int64_t[]){s.batch_size, s.block_size, s.n_embd, s.n_layer, 16}, sizeof(float));
  ct_cli_need_memory(&cli, "--batch-size x --n-head x --block-size x --block-size x --n-layer floats (attention: "
                     "about 3)", 6, (const int64_t[]){s.batch_size, s.n_head, s.block_size, s.block_size, s.n_layer, 3},
                     sizeof(float));
  if (getenv("RANK")) ct_cli_launch("ch14", argc, argv, 1); // under tools/launch: ranks > 0 print nothing
  /*md show*/
  ct_cli_begin(&cli); // "device: ...", ct_manual_seed(seed)
  s.seed = cli.seed;
  const bool rank0 = !getenv("RANK") || strcmp(getenv("RANK"), "0") == 0; // only rank 0 writes files
  ct_metrics *m = cli.metrics; // device, seed and quick recorded; only rank 0 writes the file
  if (s.generate) {
    run_generate(&s, &cli, m);
    if (ct_metrics_close(m) != CT_OK) ct_cli_die(&cli);
    return 0;
  }

  // Several processes (tools/launch): a process group, this rank's device.
  ct_process_group *pg = NULL;
  ct_device dev = cli.device;
  if (getenv("RANK")) {
    if (!(pg = ct_dist_init_process_group(dev.type == CT_CUDA ? "nccl" : "mpi"))) ct_cli_die(&cli);
    dev = ct_dist_device(pg);
  }

  corpus c;
  int rc = corpus_open(s.corpus, &c);
  if (rc == CT_OK && c.n - c.n_train <= s.block_size)
    rc = ct_fail(CT_ERR_VALUE, "ch14: --corpus %s: %" PRId64 " characters leave %" PRId64 " for validation, fewer "
                 "than --block-size %ld + 1; use a longer text or a smaller --block-size", s.corpus, c.n,
                 c.n - c.n_train, s.block_size);
  agree_or_die(pg, &cli, rc);          // every rank read its corpus, or all stop saying which did not
  if (pg) same_corpus_or_die(pg, &cli, &s, &c); // and it is the same text everywhere
  show_data(&s, &c, m);

  gpt g;
  gpt_config cfg = {c.voc.size, s.block_size, s.n_layer, s.n_head, s.n_embd};
  rc = gpt_build(&g, cfg, dev);
  if (rc == CT_OK) show_model(&g, m);

  trainer t;
  if (rc == CT_OK) rc = trainer_init(&t, &s, &g, dev);
  agree_or_die(pg, &cli, rc);          // every rank built its model before DDP's first broadcast
  t.cli = &cli;
  if (pg) {
    t.pg = pg, t.rank = ct_dist_get_rank(pg), t.world = ct_dist_get_world_size(pg);
    if (!(t.ddp = ct_ddp_create(g.root, pg, ct_ddp_defaults()))) ct_cli_die(&cli); // rank 0's weights everywhere
  }
  if (s.graphs && graphs_init(&t) != CT_OK) ct_cli_die(&cli);
  show_optimizer(&t, m);
  if (s.save_init && t.rank == 0 && save_init(&t, &c, s.save_init) != CT_OK) ct_cli_die(&cli);

  ct_cli_section("train");
  history h = {0};
  if (s.resume) resume(&t, &c.voc, &h);
  ct_profiler *prof = NULL;
  ct_cli_catch_interrupt(); // Ctrl-C ends the current step, then stops
  if (train(&t, &c, &h, &prof, rank0 ? s.profile : NULL) != CT_OK) {
    ct_cli_die(&cli);
  }
  if (h.interrupted) stop_interrupted(&t, &c.voc, &h); // exits
  if (ct_cli_synchronize(dev) != CT_OK) ct_cli_die(&cli);
  ct_metrics_series(m, "eval_steps", h.eval_step, h.n_eval);
  ct_metrics_series(m, "train_loss", h.eval_train, h.n_eval);
  ct_metrics_series(m, "val_loss", h.eval_val, h.n_eval);
  ct_metrics_series(m, "step_losses", h.step_loss, h.n_step_loss);
  ct_metrics_num(m, "first_step", (double)h.first_step);
  if (h.n_eval > 0) {
    ct_metrics_num(m, "final_train_loss", h.eval_train[h.n_eval - 1]);
    ct_metrics_num(m, "final_val_loss", h.eval_val[h.n_eval - 1]);
    ct_metrics_num(m, "initial_val_loss", h.eval_val[0]);
  }
  if (h.first_sample.p) ct_metrics_str(m, "sample_first", h.first_sample.p);
  if (h.last_sample.p) ct_metrics_str(m, "sample_last", h.last_sample.p);

  show_sample(&t, &c, m);
  show_memory(&t, &h, m);
  show_throughput(&t, &h, m);
  show_ceiling(&t, &h, m);
  if (show_profile(&t, prof, rank0 ? s.profile : NULL, m) != CT_OK) ct_cli_die(&cli);
  show_checkpoint(&t, &c.voc, &h, m);

  ct_profiler_free(prof);
  free(h.first_sample.p), free(h.last_sample.p);
  trainer_free(&t);
  gpt_free(&g);
  corpus_free(&c);
  if (pg) ct_dist_destroy_process_group(pg);
  if (ct_metrics_close(m) != CT_OK) ct_cli_die(&cli);
  return 0;
}

/*md
::: zh
## 练习

1. 用 `--corpus zh` 和 `--corpus en` 各训练一次，比较最后的验证损失和 ln V（"均匀猜测"的损失）。哪一份语料离 ln V 更远？为什么中文语料的训练损失和验证损失分得更开？
2. 把 `gpt_init_weights` 里的 0.02 改成 1.0，第 0 步的损失变成多少？和 ln V 比较，并解释 `lm_head` 和 `wte` 共享权重在这里起的作用。
3. 在 `gpt_backward` 里去掉 `ct_sum_dim`，直接把 (B, T, C) 的 dx 交给 `wpe`，会发生什么？读一读报错，写出正确的形状。
4. 实现 `get_lr`（实验区）：先线性预热、再余弦衰减。用 `--max-iters 400 --warmup-iters 0` 和 `--warmup-iters 100` 各训练一次，比较前 50 步的损失。
5. 实现 `pick_token` 的采样部分（实验区）：温度、top-k、按累积概率抽样。用同一个检查点、`--generate` 和 `--temperature 0.5`、`1.0`、`1.5` 各生成一段，描述文字的变化。
6. 注意力反向（实验区，在 `common/nn/nn_attention.c` 里）：根据 P = softmax(S) 和 y = P v 推出 dP、dv、dS、dq、dk，再实现它们。`unit.transformer_gradcheck` 用有限差分检查你的结果。
7. 用 `--profile trace.json` 训练，在 Perfetto 里打开 trace，找出一步中 `lm_head` 的前向和反向各用了多少时间。把 `--n-embd` 加倍再看一次，哪些行的比例变了？
8. 用 `tools/launch --nproc-per-node 2 ./ch14 --quick` 训练，和单进程 `--quick --batch-size 16` 比较每一步的损失。它们为什么几乎相同（提示：`draw_batch` 怎样给每个进程分行）？又为什么不是逐位相同（提示：all-reduce 求平均的加法顺序）？
:::
::: en
## Exercises

1. Train once with `--corpus zh` and once with `--corpus en` and compare the final validation losses with ln V, the uniform guess's loss. Which corpus gets further below ln V? Why do the Chinese corpus's training and validation losses drift further apart?
2. Change 0.02 in `gpt_init_weights` to 1.0: what is the loss at step 0? Compare it with ln V and explain the part the tied `lm_head`/`wte` weight plays.
3. In `gpt_backward`, drop `ct_sum_dim` and hand the (B, T, C) dx straight to `wpe`. What happens? Read the error and write down the right shape.
4. Write `get_lr` (a lab region): linear warm-up, then cosine decay. Train with `--max-iters 400 --warmup-iters 0` and with `--warmup-iters 100` and compare the first 50 steps' losses.
5. Write the sampling part of `pick_token` (a lab region): temperature, top-k, a draw by cumulative probability. From one checkpoint, `--generate` with `--temperature 0.5`, `1.0` and `1.5` and describe how the text changes.
6. Attention's backward (a lab region in `common/nn/nn_attention.c`): from P = softmax(S) and y = P v derive dP, dv, dS, dq and dk, then write them. `unit.transformer_gradcheck` checks your result with finite differences.
7. Train with `--profile trace.json` and open the trace in Perfetto: how long do `lm_head`'s forward and backward take in one step? Double `--n-embd` and look again: which rows change their share?
8. Train with `tools/launch --nproc-per-node 2 ./ch14 --quick` and compare each step's loss with one process and `--quick --batch-size 16`. Why are they nearly the same (hint: how `draw_batch` gives each process its rows)? And why not bit-identical (hint: the order of the additions in the all-reduce's average)?
:::
*/
