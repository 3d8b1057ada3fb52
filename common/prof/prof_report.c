// SPDX-License-Identifier: MIT
//
// prof_report: what a session's records become: the events of a cycle
// (collect), the key_averages table, and the Chrome trace.
//
// Invariant of collect: the events of one thread are in begin order and a
// parent always precedes its children, so one pass forward attributes
// memory and subtracts children's time, and one pass backward sums device
// time and memory up the tree. Kernels come last, one per op that has
// device events.
#define _GNU_SOURCE

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atomic_file.h"
#include "error.h"
#include "prof_internal.h"
#include "strbuf.h"

static bool is_range(ct_profiler_event_kind k) {
  return k == CT_EVENT_USER || k == CT_EVENT_STEP || k == CT_EVENT_MODULE || k == CT_EVENT_OP;
}

static bool in_window(const ct_profiler *p, const ct_profiler_event *e) {
  return e->ts_us >= p->win_start && e->ts_us + e->dur_us <= p->win_end;
}

// An op's device events, resolved after every buffer is read.
typedef struct pending_kernel {
  int op;
  ct_event *ev0, *ev1;
  ct_stream *stream;
} pending_kernel;

// Streams numbered per device: the default stream 0, the others 1, 2, ... in
// order of first appearance.
typedef struct stream_ids {
  const ct_stream *s[64];
  int n;
} stream_ids;

static int stream_number(stream_ids *ids, ct_stream *s) {
  ct_device d = ct_stream_device(s);
  if (s == ct_default_stream(d)) return 0;
  for (int i = 0; i < ids->n; ++i)
    if (ids->s[i] == s) return i + 1;
  if (ids->n < 64) ids->s[ids->n++] = s;
  return ids->n;
}

// Copies the window's records of buffer b into out (from *n on): parents
// remapped to the nearest kept ancestor. Pending kernels are noted.
static int take_buffer(const ct_profiler *p, cti_prof_buf *b, ct_profiler_event *out, int *n,
                       pending_kernel *pk, int *npk) {
  int *map = malloc((size_t)(b->n ? b->n : 1) * sizeof *map);
  if (!map) return ct_fail(CT_ERR_OOM, "ct_profiler: out of host memory collecting events");
  for (int i = 0; i < b->n; ++i) {
    cti_prof_rec *r = &b->recs[i];
    map[i] = -1;
    if (!r->done || !in_window(p, &r->e)) continue;
    ct_profiler_event e = r->e;
    int parent = e.parent;
    while (parent >= 0 && map[parent] < 0) parent = b->recs[parent].e.parent;
    e.parent = parent >= 0 ? map[parent] : -1;
    e.depth = e.parent >= 0 ? out[e.parent].depth + 1 : 0;
    e.self_cpu_us = is_range(e.kind) ? e.dur_us : 0;
    e.device_us = e.device_total_us = 0;
    memset(e.self_mem, 0, sizeof e.self_mem);
    memset(e.mem, 0, sizeof e.mem);
    map[i] = *n;
    out[(*n)++] = e;
    if (r->ev0 && r->ev1) pk[(*npk)++] = (pending_kernel){map[i], r->ev0, r->ev1, r->stream};
  }
  free(map);
  return CT_OK;
}

// Appends the kernel of pending op k: its device time, placed on the host's
// timeline from the device's clock origin.
static void add_kernel(const ct_profiler *p, const pending_kernel *k, ct_profiler_event *out, int *n,
                       stream_ids *ids) {
  float ms = 0, off = 0;
  if (ct_event_elapsed_time(k->ev0, k->ev1, &ms) != CT_OK) return;
  ct_profiler_event *op = &out[k->op];
  ct_device d = ct_stream_device(k->stream);
  int slot = cti_prof_slot(d);
  if (slot < 0) return;
  double ts = op->ts_us;
  if (p->base[slot] && ct_event_elapsed_time(p->base[slot], k->ev0, &off) == CT_OK)
    ts = p->base_us[slot] + 1e3 * off;
  op->device_us = 1e3 * ms;
  ct_profiler_event e = {.kind = CT_EVENT_KERNEL, .tid = stream_number(&ids[slot], k->stream),
                         .device = d, .parent = -1, .ts_us = ts, .dur_us = 1e3 * ms,
                         .device_us = 1e3 * ms, .device_total_us = 1e3 * ms, .correlation = k->op};
  memcpy(e.name, op->name, sizeof e.name);
  memcpy(e.shapes, op->shapes, sizeof e.shapes);
  out[(*n)++] = e;
}

// Self times, memory attribution and the sums up the tree (see the top).
static void attribute(ct_profiler_event *ev, int n) {
  for (int i = 0; i < n; ++i) {
    ct_profiler_event *e = &ev[i];
    if (e->parent < 0) continue;
    ct_profiler_event *up = &ev[e->parent];
    if (is_range(e->kind)) up->self_cpu_us -= e->dur_us;
    if (e->kind == CT_EVENT_MEMORY) up->self_mem[e->device.type == CT_CUDA] += e->bytes;
  }
  for (int i = 0; i < n; ++i) {
    if (!is_range(ev[i].kind)) continue;
    ev[i].device_total_us = ev[i].device_us;
    ev[i].mem[0] = ev[i].self_mem[0];
    ev[i].mem[1] = ev[i].self_mem[1];
  }
  for (int i = n - 1; i >= 0; --i) {
    ct_profiler_event *e = &ev[i];
    if (!is_range(e->kind) || e->parent < 0) continue;
    ev[e->parent].device_total_us += e->device_total_us;
    ev[e->parent].mem[0] += e->mem[0];
    ev[e->parent].mem[1] += e->mem[1];
  }
}

int cti_prof_collect(ct_profiler *p) {
  free(p->ev);
  p->ev = NULL;
  p->nev = 0;
  pthread_mutex_lock(&cti_prof_sessions_mu);
  int nbufs = 0;
  for (cti_prof_buf *b = p->bufs; b; b = b->next) nbufs++;
  cti_prof_buf **bufs = malloc((size_t)(nbufs ? nbufs : 1) * sizeof *bufs);
  int k = nbufs;
  for (cti_prof_buf *b = p->bufs; b && bufs; b = b->next) bufs[--k] = b; // oldest thread first
  pthread_mutex_unlock(&cti_prof_sessions_mu);
  if (!bufs) return ct_fail(CT_ERR_OOM, "ct_profiler: out of host memory collecting events");
  int rc = CT_OK, n = 0, npk = 0;
  ct_profiler_event *out = NULL;
  pending_kernel *pk = NULL;
  for (int i = 0; i < nbufs && rc == CT_OK; ++i) {
    cti_prof_buf *b = bufs[i];
    pthread_mutex_lock(&b->mu);
    ct_profiler_event *o2 = realloc(out, (size_t)(2 * (n + b->n) + 1) * sizeof *out);
    pending_kernel *p2 = realloc(pk, (size_t)(npk + b->n + 1) * sizeof *pk);
    if (o2) out = o2;
    if (p2) pk = p2;
    if (o2 && p2) rc = take_buffer(p, b, out, &n, pk, &npk);
    else rc = ct_fail(CT_ERR_OOM, "ct_profiler: out of host memory collecting events");
    pthread_mutex_unlock(&b->mu);
  }
  free(bufs);
  if (rc == CT_OK) {
    stream_ids ids[CTI_PROF_SLOTS];
    memset(ids, 0, sizeof ids);
    for (int i = 0; i < npk; ++i) add_kernel(p, &pk[i], out, &n, ids); // out has room for 2n
    attribute(out, n);
    p->ev = out;
    p->nev = n;
  } else {
    free(out);
  }
  free(pk);
  return rc;
}

// ---- key_averages ----------------------------------------------------------------------------
static ct_profiler_row *row_for(ct_profiler_averages *a, int *cap, const ct_profiler_event *e) {
  for (int i = 0; i < a->n; ++i)
    if (!strcmp(a->rows[i].name, e->name) && (!a->by_shape || !strcmp(a->rows[i].shapes, e->shapes)))
      return &a->rows[i];
  if (a->n == *cap) {
    int c = *cap ? 2 * *cap : 64;
    ct_profiler_row *r = realloc(a->rows, (size_t)c * sizeof *r);
    if (!r) return NULL;
    a->rows = r;
    *cap = c;
  }
  ct_profiler_row *r = &a->rows[a->n++];
  memset(r, 0, sizeof *r);
  memcpy(r->name, e->name, sizeof r->name);
  if (a->by_shape) memcpy(r->shapes, e->shapes, sizeof r->shapes);
  return r;
}

ct_profiler_averages *ct_profiler_key_averages(const ct_profiler *p, bool group_by_input_shape) {
  if (!p) {
    ct_fail(CT_ERR_VALUE, "ct_profiler_key_averages: profiler is NULL");
    return NULL;
  }
  ct_profiler_averages *a = calloc(1, sizeof *a);
  if (!a) {
    ct_fail(CT_ERR_OOM, "ct_profiler_key_averages: out of host memory");
    return NULL;
  }
  a->by_shape = group_by_input_shape;
  a->has_memory = p->o.profile_memory;
  int cap = 0;
  for (int i = 0; i < p->nev; ++i) {
    const ct_profiler_event *e = &p->ev[i];
    if (e->kind == CT_EVENT_KERNEL) a->has_device = true;
    if (e->kind == CT_EVENT_MEMORY && e->device.type == CT_CUDA) a->has_device_memory = true;
    bool stray_memory = e->kind == CT_EVENT_MEMORY && e->parent < 0; // torch's "[memory]" row
    if (!is_range(e->kind) && !stray_memory) continue;
    ct_profiler_row *r = row_for(a, &cap, e);
    if (!r) {
      ct_profiler_averages_free(a);
      ct_fail(CT_ERR_OOM, "ct_profiler_key_averages: out of host memory");
      return NULL;
    }
    r->count++;
    if (stray_memory) {
      bool cuda = e->device.type == CT_CUDA;
      *(cuda ? &r->self_device_mem : &r->self_cpu_mem) += e->bytes;
      *(cuda ? &r->device_mem : &r->cpu_mem) += e->bytes;
      continue;
    }
    r->self_cpu_us += e->self_cpu_us;
    r->cpu_total_us += e->dur_us;
    r->self_device_us += e->device_us;
    r->device_total_us += e->device_total_us;
    r->self_cpu_mem += e->self_mem[0];
    r->cpu_mem += e->mem[0];
    r->self_device_mem += e->self_mem[1];
    r->device_mem += e->mem[1];
  }
  a->has_device_memory |= a->has_device;
  for (int i = 0; i < a->n; ++i) {
    a->self_cpu_total_us += a->rows[i].self_cpu_us;
    a->self_device_total_us += a->rows[i].self_device_us;
  }
  return a;
}

void ct_profiler_averages_free(ct_profiler_averages *a) {
  if (!a) return;
  free(a->rows);
  free(a);
}

// ---- sorting ----------------------------------------------------------------------------------
typedef enum sort_key {
  K_SELF_CPU, K_CPU_TOTAL, K_CPU_AVG, K_SELF_DEV, K_DEV_TOTAL, K_DEV_AVG, K_COUNT,
  K_CPU_MEM, K_SELF_CPU_MEM, K_DEV_MEM, K_SELF_DEV_MEM, K_NAME, K_SHAPES
} sort_key;

static const struct {
  const char *name;
  sort_key key;
} SORT_KEYS[] = {
    {"self_cpu_time_total", K_SELF_CPU},     {"cpu_time_total", K_CPU_TOTAL},
    {"cpu_time", K_CPU_AVG},                 {"self_cuda_time_total", K_SELF_DEV},
    {"cuda_time_total", K_DEV_TOTAL},        {"cuda_time", K_DEV_AVG},
    {"self_device_time_total", K_SELF_DEV},  {"device_time_total", K_DEV_TOTAL},
    {"device_time", K_DEV_AVG},              {"count", K_COUNT},
    {"cpu_memory_usage", K_CPU_MEM},         {"self_cpu_memory_usage", K_SELF_CPU_MEM},
    {"cuda_memory_usage", K_DEV_MEM},        {"self_cuda_memory_usage", K_SELF_DEV_MEM},
    {"device_memory_usage", K_DEV_MEM},      {"self_device_memory_usage", K_SELF_DEV_MEM},
    {"name", K_NAME},                        {"input_shapes", K_SHAPES},
};
#define NSORT_KEYS (int)(sizeof SORT_KEYS / sizeof SORT_KEYS[0])

static double avg(double total, int64_t n) { return n ? total / (double)n : 0; }

static double sort_value(const ct_profiler_row *r, sort_key k) {
  switch (k) {
  case K_SELF_CPU: return r->self_cpu_us;
  case K_CPU_TOTAL: return r->cpu_total_us;
  case K_CPU_AVG: return avg(r->cpu_total_us, r->count);
  case K_SELF_DEV: return r->self_device_us;
  case K_DEV_TOTAL: return r->device_total_us;
  case K_DEV_AVG: return avg(r->device_total_us, r->count);
  case K_COUNT: return (double)r->count;
  case K_CPU_MEM: return (double)r->cpu_mem;
  case K_SELF_CPU_MEM: return (double)r->self_cpu_mem;
  case K_DEV_MEM: return (double)r->device_mem;
  case K_SELF_DEV_MEM: return (double)r->self_device_mem;
  default: return 0;
  }
}

static _Thread_local sort_key current_key; // qsort's comparator has no context argument

static int compare_rows(const void *x, const void *y) {
  const ct_profiler_row *a = x, *b = y;
  if (current_key == K_NAME) return strcmp(a->name, b->name);
  if (current_key == K_SHAPES) return strcmp(a->shapes, b->shapes);
  double va = sort_value(a, current_key), vb = sort_value(b, current_key);
  return va < vb ? 1 : va > vb ? -1 : strcmp(a->name, b->name); // descending; ties by name
}

int ct_profiler_averages_sort(ct_profiler_averages *a, const char *sort_by) {
  if (!a || !sort_by) return ct_fail(CT_ERR_VALUE, "ct_profiler_averages_sort: NULL argument");
  for (int i = 0; i < NSORT_KEYS; ++i) {
    if (strcmp(SORT_KEYS[i].name, sort_by)) continue;
    current_key = SORT_KEYS[i].key;
    if (a->n > 1) qsort(a->rows, (size_t)a->n, sizeof *a->rows, compare_rows);
    return CT_OK;
  }
  cti_strbuf known = {0};
  for (int i = 0; i < NSORT_KEYS; ++i) cti_sb_printf(&known, "%s%s", i ? ", " : "", SORT_KEYS[i].name);
  int rc = ct_fail(CT_ERR_VALUE, "ct_profiler_averages_sort: unknown sort_by '%s' (one of: %s)", sort_by,
                   known.s ? known.s : "");
  cti_sb_free(&known);
  return rc;
}

// ---- the table ---------------------------------------------------------------------------------
// torch.autograd.profiler_util's _format_time and _format_memory.
static const char *fmt_time(double us, char *buf, size_t len) {
  if (us >= 1e6) snprintf(buf, len, "%.3fs", us / 1e6);
  else if (us >= 1e3) snprintf(buf, len, "%.3fms", us / 1e3);
  else snprintf(buf, len, "%.3fus", us);
  return buf;
}

static const char *fmt_mem(int64_t b, char *buf, size_t len) {
  const double KB = 1024, MB = KB * 1024, GB = MB * 1024;
  double a = fabs((double)b);
  if (a >= GB) snprintf(buf, len, "%.2f Gb", (double)b / GB);
  else if (a >= MB) snprintf(buf, len, "%.2f Mb", (double)b / MB);
  else if (a >= KB) snprintf(buf, len, "%.2f Kb", (double)b / KB);
  else snprintf(buf, len, "%" PRId64 " b", b);
  return buf;
}

static const char *fmt_pct(double part, double total, char *buf, size_t len) {
  snprintf(buf, len, "%.2f%%", total > 0 ? 100.0 * part / total : 0.0);
  return buf;
}

#define COLW 12
#define NAMEW_MAX 55

typedef struct table {
  cti_strbuf b;
  int namew, shapesw;
  bool dev, mem, dev_mem, shapes;
} table;

static void rule(table *t, int ncols) {
  cti_sb_repeat(&t->b, '-', t->namew);
  for (int i = 0; i < ncols; ++i) {
    cti_sb_puts(&t->b, "  ");
    cti_sb_repeat(&t->b, '-', COLW);
  }
  if (t->shapes) {
    cti_sb_puts(&t->b, "  ");
    cti_sb_repeat(&t->b, '-', t->shapesw);
  }
  cti_sb_puts(&t->b, "  \n");
}

static void cell(table *t, const char *s) { cti_sb_printf(&t->b, "  %*s", COLW, s); }

static void line(table *t, const char *name, const char *const *cells, int ncells, const char *shapes) {
  char nm[NAMEW_MAX + 1];
  if ((int)strlen(name) > t->namew) snprintf(nm, sizeof nm, "%.*s...", t->namew - 3, name);
  else snprintf(nm, sizeof nm, "%s", name);
  cti_sb_printf(&t->b, "%*s", t->namew, nm);
  for (int i = 0; i < ncells; ++i) cell(t, cells[i]);
  if (t->shapes) cti_sb_printf(&t->b, "  %-*s", t->shapesw, shapes);
  cti_sb_puts(&t->b, "  \n");
}

char *ct_profiler_table(ct_profiler_averages *a, const char *sort_by, int row_limit) {
  if (!a) {
    ct_fail(CT_ERR_VALUE, "ct_profiler_table: averages is NULL");
    return NULL;
  }
  if (sort_by && ct_profiler_averages_sort(a, sort_by) != CT_OK) return NULL;
  int nrows = row_limit > 0 && row_limit < a->n ? row_limit : a->n;
  table t = {.namew = 4, .shapesw = 12, .dev = a->has_device, .mem = a->has_memory,
             .dev_mem = a->has_memory && a->has_device_memory, .shapes = a->by_shape};
  for (int i = 0; i < nrows; ++i) {
    int l = (int)strlen(a->rows[i].name), s = (int)strlen(a->rows[i].shapes);
    if (l > t.namew) t.namew = l < NAMEW_MAX ? l : NAMEW_MAX;
    if (s > t.shapesw) t.shapesw = s;
  }
  const char *heads[16];
  int nh = 0;
  const char *cpu_heads[] = {"Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"};
  const char *dev_heads[] = {"Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"};
  const char *mem_heads[] = {"CPU Mem", "Self CPU Mem", "CUDA Mem", "Self CUDA Mem"};
  for (int i = 0; i < 5; ++i) heads[nh++] = cpu_heads[i];
  for (int i = 0; t.dev && i < 4; ++i) heads[nh++] = dev_heads[i];
  for (int i = 0; t.mem && i < (t.dev_mem ? 4 : 2); ++i) heads[nh++] = mem_heads[i];
  heads[nh++] = "# of Calls";
  rule(&t, nh);
  line(&t, "Name", heads, nh, "Input Shapes");
  rule(&t, nh);
  char c[16][32];
  const char *cells[16];
  for (int i = 0; i < 16; ++i) cells[i] = c[i];
  double cpu_all = a->self_cpu_total_us, dev_all = a->self_device_total_us;
  for (int i = 0; i < nrows; ++i) {
    const ct_profiler_row *r = &a->rows[i];
    int k = 0;
    fmt_pct(r->self_cpu_us, cpu_all, c[k++], 32);
    fmt_time(r->self_cpu_us, c[k++], 32);
    fmt_pct(r->cpu_total_us, cpu_all, c[k++], 32);
    fmt_time(r->cpu_total_us, c[k++], 32);
    fmt_time(avg(r->cpu_total_us, r->count), c[k++], 32);
    if (t.dev) {
      fmt_time(r->self_device_us, c[k++], 32);
      fmt_pct(r->self_device_us, dev_all, c[k++], 32);
      fmt_time(r->device_total_us, c[k++], 32);
      fmt_time(avg(r->device_total_us, r->count), c[k++], 32);
    }
    if (t.mem) {
      fmt_mem(r->cpu_mem, c[k++], 32);
      fmt_mem(r->self_cpu_mem, c[k++], 32);
    }
    if (t.dev_mem) {
      fmt_mem(r->device_mem, c[k++], 32);
      fmt_mem(r->self_device_mem, c[k++], 32);
    }
    snprintf(c[k++], 32, "%" PRId64, r->count);
    line(&t, r->name, cells, k, r->shapes);
  }
  rule(&t, nh);
  char tm[32];
  cti_sb_printf(&t.b, "Self CPU time total: %s\n", fmt_time(cpu_all, tm, sizeof tm));
  if (t.dev) cti_sb_printf(&t.b, "Self CUDA time total: %s\n", fmt_time(dev_all, tm, sizeof tm));
  char *s = cti_sb_take(&t.b);
  if (!s) ct_fail(CT_ERR_OOM, "ct_profiler_table: out of host memory");
  return s;
}

// ---- the Chrome trace ----------------------------------------------------------------------------
static const char *category(ct_profiler_event_kind k) {
  switch (k) {
  case CT_EVENT_USER:
  case CT_EVENT_STEP: return "user_annotation";
  case CT_EVENT_MODULE: return "module";
  case CT_EVENT_OP: return "cpu_op";
  case CT_EVENT_KERNEL: return "kernel";
  default: return "cpu_instant_event";
  }
}

static void ts_field(cti_strbuf *b, const char *key, double us) {
  cti_sb_printf(b, ", \"%s\": %.3f", key, us);
}

static void meta(cti_strbuf *b, const char *what, int pid, int tid, const char *name) {
  cti_sb_printf(b, "  {\"ph\": \"M\", \"name\": \"%s\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": ", what, pid, tid);
  cti_json_string(b, name);
  cti_sb_puts(b, "}},\n");
}

static void range_event(cti_strbuf *b, const ct_profiler_event *e, int i, int pid) {
  char dev[CT_DEVICE_STR_MAX];
  cti_sb_puts(b, "  {\"ph\": \"X\", \"cat\": ");
  cti_json_string(b, category(e->kind));
  cti_sb_puts(b, ", \"name\": ");
  cti_json_string(b, e->name);
  bool kernel = e->kind == CT_EVENT_KERNEL;
  cti_sb_printf(b, ", \"pid\": %d, \"tid\": %d", kernel ? e->device.index : pid, e->tid);
  ts_field(b, "ts", e->ts_us);
  ts_field(b, "dur", e->dur_us);
  cti_sb_printf(b, ", \"args\": {\"External id\": %d", kernel ? e->correlation : i);
  if (kernel) cti_sb_printf(b, ", \"device\": %d, \"stream\": %d, \"correlation\": %d", e->device.index, e->tid, e->correlation);
  if (e->kind == CT_EVENT_OP) {
    cti_sb_puts(b, ", \"Device\": ");
    cti_json_string(b, ct_device_str(e->device, dev));
  }
  if (e->shapes[0]) {
    cti_sb_puts(b, ", \"Input Dims\": ");
    cti_json_string(b, e->shapes);
  }
  cti_sb_puts(b, "}},\n");
}

// torch's memory instant event: Device Type 0 = CPU, 1 = CUDA.
static void memory_event(cti_strbuf *b, const ct_profiler_event *e, int pid) {
  bool cuda = e->device.type == CT_CUDA;
  cti_sb_printf(b, "  {\"ph\": \"i\", \"s\": \"t\", \"cat\": \"cpu_instant_event\", \"name\": \"[memory]\", "
                "\"pid\": %d, \"tid\": %d", pid, e->tid);
  ts_field(b, "ts", e->ts_us);
  cti_sb_printf(b, ", \"args\": {\"Device Type\": %d, \"Device Id\": %d, \"Addr\": %" PRIu64
                ", \"Bytes\": %" PRId64 ", \"Total Allocated\": %" PRIu64 ", \"Total Reserved\": %" PRIu64 "}},\n",
                cuda ? 1 : 0, cuda ? e->device.index : -1, e->addr, e->bytes, e->total_allocated,
                e->total_reserved);
}

// Names the process, every thread seen and every device and stream.
static void metadata(cti_strbuf *b, const ct_profiler *p, int pid) {
  meta(b, "process_name", pid, 0, "ct (CPU)");
  int seen_t[256], nt = 0;
  bool dev_named[CT_MAX_CUDA_DEVICES] = {false};
  for (int i = 0; i < p->nev; ++i) {
    const ct_profiler_event *e = &p->ev[i];
    char name[64];
    if (e->kind == CT_EVENT_KERNEL) {
      int d = e->device.index;
      if (d >= 0 && d < CT_MAX_CUDA_DEVICES && !dev_named[d]) {
        snprintf(name, sizeof name, "GPU %d", d);
        meta(b, "process_name", d, 0, name);
        dev_named[d] = true;
      }
      continue;
    }
    bool known = false;
    for (int k = 0; k < nt && !known; ++k) known = seen_t[k] == e->tid;
    if (known || nt == 256) continue;
    seen_t[nt++] = e->tid;
    snprintf(name, sizeof name, "thread %d%s", e->tid, e->tid == pid ? " (main)" : "");
    meta(b, "thread_name", pid, e->tid, name);
  }
}

int ct_profiler_export_chrome_trace(const ct_profiler *p, const char *path) {
  const char *op = "ct_profiler_export_chrome_trace";
  if (!p || !path) return ct_fail(CT_ERR_VALUE, "%s: NULL profiler or path", op);
  int pid = (int)getpid();
  cti_strbuf b = {0};
  cti_sb_puts(&b, "{\n\"schemaVersion\": 1,\n\"displayTimeUnit\": \"ms\",\n\"traceEvents\": [\n");
  metadata(&b, p, pid);
  for (int i = 0; i < p->nev; ++i) {
    const ct_profiler_event *e = &p->ev[i];
    if (e->kind == CT_EVENT_MEMORY) memory_event(&b, e, pid);
    else range_event(&b, e, i, pid);
  }
  // The array ends with one more metadata event, so that no element is
  // followed by a dangling comma.
  cti_sb_printf(&b, "  {\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": %d, \"tid\": 0, "
                "\"args\": {\"sort_index\": 0}}\n]\n}\n", pid);
  if (b.oom) {
    cti_sb_free(&b);
    return ct_fail(CT_ERR_OOM, "%s: out of host memory", op);
  }
  int rc = cti_write_file_atomically(op, path, b.s, b.len);
  cti_sb_free(&b);
  return rc;
}
