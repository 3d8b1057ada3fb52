// SPDX-License-Identifier: MIT
//
// train_checkpoint: a training run saved so that --resume continues it
// exactly, the C side of torch.save({"model": ..., "optimizer": ..., "epoch":
// ...}) in one safetensors file:
//   tensors   "model.<name>"                 model.state_dict()
//             "optimizer.state.<i>.<key>"    the optimizer's state (optim.h)
//   metadata  ct.format = "ct-train/1", optimizer = "Adam", lr,
//             epoch, batch, step (train progress),
//             rng.cpu = "<seed> <offset>" and rng.<device> for the model's
//             device (the generators dropout draws from),
//             and whatever the caller adds (a GradScaler's state, a running
//             loss sum, ...).
//
// Invariant: a resumed run given the same flags repeats the uninterrupted
// run bit for bit: every number a step depends on (weights, buffers,
// optimizer state, generator offsets, the data order and position) is in the
// file, written exactly (tensors as their bytes, numbers as %.17g or
// integers). A load that fails (another model, another optimizer, a damaged
// file) says which; the caller must not go on with a half-restored run.
#define _POSIX_C_SOURCE 200809L // strdup
#include <errno.h>
#include "checkpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "optim.h"
#include "random.h"
#include "train_checkpoint.h"

#define OP_SAVE "ct_save_train_checkpoint"
#define OP_LOAD "ct_load_train_checkpoint"
#define MAX_META 64 // pairs

// Metadata under construction: keys and values in one flat array of owned strings.
typedef struct meta_list {
  char *kv[2 * MAX_META + 1];
  int n; // pairs
} meta_list;

static int meta_put(meta_list *m, const char *key, const char *value) {
  if (m->n == MAX_META) return ct_fail(CT_ERR_VALUE, OP_SAVE ": more than %d metadata entries", MAX_META);
  char *k = strdup(key), *v = strdup(value);
  if (!k || !v) {
    free(k), free(v);
    return ct_fail(CT_ERR_OOM, OP_SAVE ": out of host memory");
  }
  m->kv[2 * m->n] = k;
  m->kv[2 * m->n + 1] = v;
  m->n++;
  m->kv[2 * m->n] = NULL;
  return CT_OK;
}

static int meta_i64(meta_list *m, const char *key, int64_t v) {
  char b[32];
  snprintf(b, sizeof b, "%" PRId64, v);
  return meta_put(m, key, b);
}

static void meta_free(meta_list *m) {
  for (int i = 0; i < 2 * m->n; ++i) free(m->kv[i]);
  m->n = 0;
}

static int meta_rng(meta_list *m, ct_device d) {
  ct_rng_state st;
  int rc = ct_get_rng_state(d, &st);
  if (rc != CT_OK) return rc;
  char key[48], dev[CT_DEVICE_STR_MAX], val[48];
  snprintf(key, sizeof key, "rng.%s", ct_device_str(d, dev));
  snprintf(val, sizeof val, "%" PRIu64 " %" PRIu64, st.seed, st.offset);
  return meta_put(m, key, val);
}

// Appends `add` (new references, names prefixed) to the growing entry array.
static int append(ct_named_tensor **all, int *n, ct_named_tensor *add, int nadd, const char *prefix) {
  ct_named_tensor *g = realloc(*all, (size_t)(*n + nadd + 1) * sizeof *g);
  if (!g) {
    ct_named_tensors_free(add, nadd);
    return ct_fail(CT_ERR_OOM, OP_SAVE ": out of host memory");
  }
  *all = g;
  for (int i = 0; i < nadd; ++i) {
    ct_named_tensor e = add[i];
    const size_t pl = strlen(prefix), nl = strlen(add[i].name);
    if (pl + nl >= sizeof e.name) {
      int rc = ct_fail(CT_ERR_VALUE, OP_SAVE ": name \"%s%s\" is too long", prefix, add[i].name);
      for (int j = i; j < nadd; ++j) ct_free(add[j].tensor);
      free(add);
      return rc;
    }
    memcpy(e.name, prefix, pl);
    memcpy(e.name + pl, add[i].name, nl + 1);
    g[(*n)++] = e;
  }
  free(add);
  return CT_OK;
}

int ct_save_train_checkpoint(const char *path, ct_module *m, ct_optimizer *opt, const ct_train_progress *p,
                             const char *const *extra) {
  if (!path || !m || !opt || !p) return ct_fail(CT_ERR_VALUE, OP_SAVE ": NULL argument");
  ct_named_tensor *all = NULL, *add;
  int n = 0, nadd = 0, rc;
  meta_list meta = {{NULL}, 0};
  char lr[40];
  snprintf(lr, sizeof lr, "%.17g", ct_optimizer_get_lr(opt));
  if (!(add = ct_module_state_dict(m, "", &nadd))) return ct_last_status();
  if ((rc = append(&all, &n, add, nadd, CTI_TRAIN_MODEL_PREFIX))) goto out;
  if (!(add = ct_optimizer_state_dict(opt, "", &nadd))) {
    rc = ct_last_status();
    goto out;
  }
  if ((rc = append(&all, &n, add, nadd, CTI_TRAIN_OPTIM_PREFIX))) goto out;
  if ((rc = meta_put(&meta, "ct.format", CTI_TRAIN_FORMAT)) || (rc = meta_put(&meta, "format", "pt")) ||
      (rc = meta_put(&meta, "optimizer", ct_optimizer_name(opt))) || (rc = meta_put(&meta, "lr", lr)) ||
      (rc = meta_i64(&meta, "epoch", p->epoch)) || (rc = meta_i64(&meta, "batch", p->batch)) ||
      (rc = meta_i64(&meta, "step", p->step)) || (rc = meta_rng(&meta, ct_device_cpu())))
    goto out;
  if (ct_module_device(m).type != CT_CPU && (rc = meta_rng(&meta, ct_module_device(m)))) goto out;
  for (int i = 0; extra && extra[2 * i]; ++i) {
    if (!extra[2 * i + 1]) {
      rc = ct_fail(CT_ERR_VALUE, OP_SAVE ": extra metadata key \"%s\" has no value", extra[2 * i]);
      goto out;
    }
    if ((rc = meta_put(&meta, extra[2 * i], extra[2 * i + 1]))) goto out;
  }
  rc = ct_save_safetensors(path, all, n, (const char *const *)meta.kv);
out:
  ct_named_tensors_free(all, n);
  meta_free(&meta);
  return rc;
}

// Parses metadata `key` as a non-negative integer.
static int get_i64(const char *path, char *const *meta, const char *key, int64_t *out) {
  const char *v = ct_metadata_get(meta, key);
  char *end = NULL;
  errno = 0;
  long long x = v ? strtoll(v, &end, 10) : -1;
  if (!v || end == v || *end || x < 0 || errno == ERANGE || x > (1LL << 53)) // a count, with room to add to it
    return ct_fail(CT_ERR_IO, OP_LOAD ": %s: metadata \"%s\" is %s%s%s, expected a count: the file is damaged", path,
                   key, v ? "\"" : "missing", v ? v : "", v ? "\"" : "");
  *out = x;
  return CT_OK;
}

// Restores the generator of d from "rng.<d>" = "<seed> <offset>".
static int set_rng(const char *path, char *const *meta, ct_device d) {
  char key[48], dev[CT_DEVICE_STR_MAX];
  snprintf(key, sizeof key, "rng.%s", ct_device_str(d, dev));
  const char *v = ct_metadata_get(meta, key);
  unsigned long long seed, offset;
  int used = 0;
  if (!v || sscanf(v, "%llu %llu%n", &seed, &offset, &used) != 2 || v[used])
    return ct_fail(CT_ERR_IO, OP_LOAD ": %s: metadata \"%s\" is %s, expected \"<seed> <offset>\"", path, key,
                   v ? v : "missing");
  return ct_set_rng_state(d, (ct_rng_state){seed, offset});
}

int ct_load_train_checkpoint(const char *path, ct_module *m, ct_optimizer *opt, ct_train_progress *p,
                             char ***metadata) {
  if (metadata) *metadata = NULL;
  if (!path || !m || !opt || !p) return ct_fail(CT_ERR_VALUE, OP_LOAD ": NULL argument");
  ct_named_tensor *es = NULL;
  char **meta = NULL;
  int n = 0, rc = ct_load_safetensors_with_metadata(path, ct_module_device(m), &es, &n, &meta);
  if (rc != CT_OK) return rc;
  ct_train_progress got = {0};
  const char *saved_opt = ct_metadata_get(meta, "optimizer");
  if (!cti_is_train_checkpoint(meta)) {
    rc = ct_fail(CT_ERR_VALUE, OP_LOAD ": %s: not a training checkpoint (no \"ct.format\": \"" CTI_TRAIN_FORMAT
                 "\" in its metadata): it holds a model's weights only, without the optimizer's state and the step a "
                 "resumed run needs; a resumable file is written by --save when training is interrupted", path);
    goto out;
  }
  if (!saved_opt || strcmp(saved_opt, ct_optimizer_name(opt)) != 0) {
    rc = ct_fail(CT_ERR_VALUE, OP_LOAD ": %s: the run was saved with the %s optimizer, this one uses %s: resume "
                 "with the same flags", path, saved_opt ? saved_opt : "(unnamed)", ct_optimizer_name(opt));
    goto out;
  }
  if ((rc = get_i64(path, meta, "epoch", &got.epoch)) || (rc = get_i64(path, meta, "batch", &got.batch)) ||
      (rc = get_i64(path, meta, "step", &got.step)))
    goto out;
  // Split: the optimizer's entries first (a copy of the array's slots), then the model's.
  ct_named_tensor *oes = calloc((size_t)(n ? n : 1), sizeof *oes);
  if (!oes) {
    rc = ct_fail(CT_ERR_OOM, OP_LOAD ": out of host memory");
    goto out;
  }
  int no = 0;
  for (int i = 0; i < n; ++i)
    if (strncmp(es[i].name, CTI_TRAIN_OPTIM_PREFIX, strlen(CTI_TRAIN_OPTIM_PREFIX)) == 0) {
      oes[no] = es[i];
      if (!(oes[no].tensor = ct_clone(es[i].tensor))) { // its own reference
        ct_named_tensors_free(oes, no);
        rc = ct_last_status();
        goto out;
      }
      no++;
    }
  n = cti_keep_prefixed(es, n, CTI_TRAIN_MODEL_PREFIX);
  rc = ct_module_load_state(m, es, n, true);
  if (rc == CT_OK) rc = ct_optimizer_load_state_dict(opt, oes, no, CTI_TRAIN_OPTIM_PREFIX);
  ct_named_tensors_free(oes, no);
  if (rc != CT_OK) {
    char inner[700];
    snprintf(inner, sizeof inner, "%s", ct_last_error());
    rc = ct_fail((ct_status)rc, OP_LOAD ": %s: %s", path, inner);
    goto out;
  }
  if ((rc = set_rng(path, meta, ct_device_cpu()))) goto out;
  if (ct_module_device(m).type != CT_CPU && (rc = set_rng(path, meta, ct_module_device(m)))) goto out;
  *p = got;
  if (metadata) *metadata = meta, meta = NULL;
out:
  ct_named_tensors_free(es, n);
  ct_metadata_free(meta);
  return rc;
}
