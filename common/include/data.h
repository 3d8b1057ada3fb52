// SPDX-License-Identifier: MIT
//
// data: datasets and the DataLoader (torch.utils.data).
//
// A dataset is a table of samples: sample i is (x_i, y_i) with fixed shapes
// and dtypes. A DataLoader draws index batches (shuffled with its own seeded
// Philox permutation each epoch, so runs repeat), has worker threads gather
// batches into host tensors (pinned when pin_memory), keeps up to
// prefetch_factor * num_workers batches in flight, and copies each batch to
// the target device on a side stream; the current stream waits on that copy's
// event, so loading overlaps compute and the order of work stays correct.
//
// Invariant: batches come out in order (batch k of the epoch is the k-th
// slice of the epoch's permutation) whatever the number of workers.
#ifndef CT_DATA_H
#define CT_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_dataset ct_dataset;

int64_t ct_dataset_len(const ct_dataset *ds);
// Shapes and dtypes of ONE sample (no batch dim).
ct_shape ct_dataset_x_shape(const ct_dataset *ds);
ct_shape ct_dataset_y_shape(const ct_dataset *ds);
ct_dtype ct_dataset_x_dtype(const ct_dataset *ds);
ct_dtype ct_dataset_y_dtype(const ct_dataset *ds);
// Writes samples idx[0..n) into CPU tensors x (n, *x_shape) and y (n,
// *y_shape), contiguous. Safe to call from several threads at once.
int ct_dataset_get_batch(const ct_dataset *ds, const int64_t *idx, int64_t n, ct_tensor *x,
                         ct_tensor *y);
void ct_dataset_free(ct_dataset *ds);

// TensorDataset(x, y): the first dim is the sample; both must be CPU tensors
// with the same first dim. Keeps references.
ct_dataset *ct_tensor_dataset(ct_tensor *x, ct_tensor *y);
// The seeds' RandomDataset(size, length): x = randn(length, size) from the
// CPU generator at creation; y = 0 (int64) for each sample.
ct_dataset *ct_random_dataset(int64_t size, int64_t length);

// Fashion-MNIST from the four IDX files (gzip or not) in `dir` (NULL: the
// environment variable CT_FASHION_MNIST_DIR, else
// /usr/share/datasets/fashion-mnist from Debian's dataset-fashion-mnist):
// train-images-idx3-ubyte.gz etc. x float32 (1, 28, 28) = pixel / 255
// (transforms.ToTensor), then (x - mean) / std when std > 0
// (transforms.Normalize); y int64 in [0, 10). A missing or malformed file
// fails with CT_ERR_IO naming the path and the fix.
ct_dataset *ct_fashion_mnist(const char *dir, bool train, double mean, double std);
const char *ct_fashion_mnist_class_name(int label); // "T-shirt/top", ..., "Ankle boot"

// Reads an IDX file (http://yann.lecun.com/exdb/mnist/ format; gzip or
// plain, detected by the magic bytes) into a new CPU tensor of its dtype
// (0x08 u8, 0x09 i8 -> i32, 0x0B i16 -> i32, 0x0C i32, 0x0D f32, 0x0E f64)
// and dims. Checks
// the magic, the dims against the file's size, and truncation.
ct_tensor *ct_idx_read(const char *path);

typedef struct ct_dataloader_options {
  int64_t batch_size;  // default 1
  bool shuffle;
  bool drop_last;
  int num_workers;     // 0: batches are gathered on the calling thread
  bool pin_memory;     // host batches in pinned memory; without CUDA, warns once on
                       // stderr and goes on unpinned, as torch does
  int prefetch_factor; // batches in flight per worker (default 2)
  uint64_t seed;       // shuffling seed: epoch e (counting start_epoch calls from 0)
                       // is a Fisher-Yates shuffle driven by Philox with key seed + e
  ct_device device;    // where batches are delivered (default: the CPU)
} ct_dataloader_options;

ct_dataloader_options ct_dataloader_defaults(void);

typedef struct ct_dataloader ct_dataloader;
// The loader borrows ds: the dataset must outlive it.
ct_dataloader *ct_dataloader_create(ct_dataset *ds, ct_dataloader_options options);
void ct_dataloader_free(ct_dataloader *dl);
int64_t ct_dataloader_len(const ct_dataloader *dl); // batches per epoch
// Starts an epoch (new permutation when shuffling) and its workers.
int ct_dataloader_start_epoch(ct_dataloader *dl);
// The next batch of the epoch: returns 1 and new tensors in *x, *y (on the
// loader's device; the caller frees them), 0 at the end of the epoch (and
// until the next start_epoch), or a negative ct_status on error. A loader
// never started begins epoch 0 by itself.
int ct_dataloader_next(ct_dataloader *dl, ct_tensor **x, ct_tensor **y);
// Positions the loader for a resumed run: the next start_epoch starts epoch
// `epoch` (counting from 0: its permutation, as if `epoch` epochs had been
// started before) and skips its first `batch` batches without loading them,
// so the batches that follow are the ones an uninterrupted run would see.
int ct_dataloader_resume_at(ct_dataloader *dl, int64_t epoch, int64_t batch);

#ifdef __cplusplus
}
#endif
#endif
