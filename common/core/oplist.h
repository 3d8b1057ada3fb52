// SPDX-License-Identifier: MIT
//
// oplist: the machinery that turns one list per op family into everything
// the runtime writes per entry (internal).
//
// Each family writes its entries once, as an X-macro list next to the
// family's contract: CTI_CORE_OPS (backend.h), CTI_NN_OPS (nn_kernels.h),
// CTI_CONV_OPS (conv_kernels.h), CTI_OPTIM_OPS (optim_kernels.h),
// CTI_TRANSFORMER_OPS (transformer_kernels.h), CTI_AMP_OPS (amp_kernels.h).
// A list is `#define CTI_NN_OPS(X) X(nn, name, kind, ret, aten, shapes, params...)`
// with one X(...) per entry:
//   nn       the family (the table is cti_backend's member of that name;
//            `core` for the plain ops in cti_backend itself);
//   name     the entry (the table's member);
//   kind     OP: queued on its stream `s` (the recorder records it, the
//                profiler brackets it);
//            BAD: as OP, with an ARG_BAD host variable that reports a bad
//                index; a recorded call has none, so replay checks it (the
//                recorder's <family>_<name>_bad gives the eager message);
//            WAIT: waits for its answer on the host (never recorded: capture
//                refuses it; profiled);
//            QUERY: no stream, no work (passed through, not profiled);
//   ret      the return type;
//   aten     the profiler's range name, an expression of the parameters
//            (PyTorch's aten:: name where one fits; "ct::" is prepended);
//   shapes   the profiler's record_shapes string, an expression of the
//            parameters and of the profiler's helpers (prof_backend.c);
//   params   ARG(type, name) a parameter passed and recorded as is;
//            ARG_COPY(type, name) a `const type *name` whose pointee the
//                recorder copies (a cti_iter, a geometry, an args struct);
//            ARG_BAD(type, name) a `type *name` host variable (kind BAD);
//            every kind but QUERY gets a last parameter `ct_stream *s`;
//            QUERY lists `void`.
// From a list come: the table's struct type (CTI_OP_FIELD), the CPU table
// (designated initializers, CTI_OP_CPU_INIT), the CUDA table (the list's
// order, CTI_OP_CUDA_INIT: nvcc compiles C++17, which has no designated
// initializers, and the same list fixes both orders), the graph recorder's
// argument struct, stand-in and replay call (graph_backend.c), and the
// profiler's wrapper (prof_backend.c). Adding an op touches its family's
// list and its two kernels.
#ifndef CT_OPLIST_H
#define CT_OPLIST_H

#define CTI_CAT(a, b) CTI_CAT_(a, b)
#define CTI_CAT_(a, b) a##b

// CTI_MAP(F, SEP, p1, ..., pn) = F(p1) SEP() F(p2) ... F(pn), n <= 24.
#define CTI_NARGS(...) CTI_NARGS_(__VA_ARGS__, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, \
                                  11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define CTI_NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, \
                   _19, _20, _21, _22, _23, _24, n, ...) n
#define CTI_MAP(F, SEP, ...) CTI_CAT(CTI_MAP_, CTI_NARGS(__VA_ARGS__))(F, SEP, __VA_ARGS__)
#define CTI_MAP_1(F, S, a) F(a)
#define CTI_MAP_2(F, S, a, ...) F(a) S() CTI_MAP_1(F, S, __VA_ARGS__)
#define CTI_MAP_3(F, S, a, ...) F(a) S() CTI_MAP_2(F, S, __VA_ARGS__)
#define CTI_MAP_4(F, S, a, ...) F(a) S() CTI_MAP_3(F, S, __VA_ARGS__)
#define CTI_MAP_5(F, S, a, ...) F(a) S() CTI_MAP_4(F, S, __VA_ARGS__)
#define CTI_MAP_6(F, S, a, ...) F(a) S() CTI_MAP_5(F, S, __VA_ARGS__)
#define CTI_MAP_7(F, S, a, ...) F(a) S() CTI_MAP_6(F, S, __VA_ARGS__)
#define CTI_MAP_8(F, S, a, ...) F(a) S() CTI_MAP_7(F, S, __VA_ARGS__)
#define CTI_MAP_9(F, S, a, ...) F(a) S() CTI_MAP_8(F, S, __VA_ARGS__)
#define CTI_MAP_10(F, S, a, ...) F(a) S() CTI_MAP_9(F, S, __VA_ARGS__)
#define CTI_MAP_11(F, S, a, ...) F(a) S() CTI_MAP_10(F, S, __VA_ARGS__)
#define CTI_MAP_12(F, S, a, ...) F(a) S() CTI_MAP_11(F, S, __VA_ARGS__)
#define CTI_MAP_13(F, S, a, ...) F(a) S() CTI_MAP_12(F, S, __VA_ARGS__)
#define CTI_MAP_14(F, S, a, ...) F(a) S() CTI_MAP_13(F, S, __VA_ARGS__)
#define CTI_MAP_15(F, S, a, ...) F(a) S() CTI_MAP_14(F, S, __VA_ARGS__)
#define CTI_MAP_16(F, S, a, ...) F(a) S() CTI_MAP_15(F, S, __VA_ARGS__)
#define CTI_MAP_17(F, S, a, ...) F(a) S() CTI_MAP_16(F, S, __VA_ARGS__)
#define CTI_MAP_18(F, S, a, ...) F(a) S() CTI_MAP_17(F, S, __VA_ARGS__)
#define CTI_MAP_19(F, S, a, ...) F(a) S() CTI_MAP_18(F, S, __VA_ARGS__)
#define CTI_MAP_20(F, S, a, ...) F(a) S() CTI_MAP_19(F, S, __VA_ARGS__)
#define CTI_MAP_21(F, S, a, ...) F(a) S() CTI_MAP_20(F, S, __VA_ARGS__)
#define CTI_MAP_22(F, S, a, ...) F(a) S() CTI_MAP_21(F, S, __VA_ARGS__)
#define CTI_MAP_23(F, S, a, ...) F(a) S() CTI_MAP_22(F, S, __VA_ARGS__)
#define CTI_MAP_24(F, S, a, ...) F(a) S() CTI_MAP_23(F, S, __VA_ARGS__)
#define CTI_SEP_COMMA() ,
#define CTI_SEP_NONE()

// A parameter, by its kind (ARG, ARG_COPY, ARG_BAD): CTI_PARAM_<use>_<kind>.
// DECL: its declaration in the signature; NAME: its name as an argument.
#define CTI_PARAM_DECL(p) CTI_PARAM_DECL_##p
#define CTI_PARAM_DECL_ARG(t, n) t n
#define CTI_PARAM_DECL_ARG_COPY(t, n) const t *n
#define CTI_PARAM_DECL_ARG_BAD(t, n) t *n
#define CTI_PARAM_NAME(p) CTI_PARAM_NAME_##p
#define CTI_PARAM_NAME_ARG(t, n) n
#define CTI_PARAM_NAME_ARG_COPY(t, n) n
#define CTI_PARAM_NAME_ARG_BAD(t, n) n

// The parameter list of an entry, and its arguments passed on unchanged.
#define CTI_OP_PARAMS(...) CTI_MAP(CTI_PARAM_DECL, CTI_SEP_COMMA, __VA_ARGS__)
#define CTI_OP_ARGS(...) CTI_MAP(CTI_PARAM_NAME, CTI_SEP_COMMA, __VA_ARGS__)

// The table's member for one entry.
#define CTI_OP_FIELD(fam, name, kind, ret, aten, shapes, ...) CTI_OP_FIELD_##kind(name, ret, __VA_ARGS__)
#define CTI_OP_FIELD_OP(name, ret, ...) ret (*name)(CTI_OP_PARAMS(__VA_ARGS__), ct_stream *s);
#define CTI_OP_FIELD_BAD CTI_OP_FIELD_OP
#define CTI_OP_FIELD_WAIT CTI_OP_FIELD_OP
#define CTI_OP_FIELD_QUERY(name, ret, ...) ret (*name)(void);

// The CPU table's initializer: `.name = <prefix>name,` for each entry, the
// prefix set by the file that defines the table (CTI_OP_CPU_PREFIX).
#define CTI_OP_CPU_INIT(fam, name, ...) .name = CTI_CAT(CTI_OP_CPU_PREFIX, name),
// The CUDA table's initializer: `<prefix>name,` in the list's order.
#define CTI_OP_CUDA_INIT(fam, name, ...) CTI_CAT(CTI_OP_CUDA_PREFIX, name),

// The family's table inside a backend `be`: CTI_OP_TABLE(nn, be) is be->nn,
// CTI_OP_TABLE(core, be) is be itself.
#define CTI_OP_TABLE(fam, be) CTI_OP_TABLE_##fam(be)
#define CTI_OP_TABLE_core(be) (be)
#define CTI_OP_TABLE_nn(be) ((be)->nn)
#define CTI_OP_TABLE_conv(be) ((be)->conv)
#define CTI_OP_TABLE_optim(be) ((be)->optim)
#define CTI_OP_TABLE_transformer(be) ((be)->transformer)
#define CTI_OP_TABLE_amp(be) ((be)->amp)

// Every family's list, for code that covers them all: CTI_ALL_OPS(X).
#define CTI_ALL_OPS(X)                                                                               \
  CTI_CORE_OPS(X) CTI_NN_OPS(X) CTI_CONV_OPS(X) CTI_OPTIM_OPS(X) CTI_TRANSFORMER_OPS(X) CTI_AMP_OPS(X)

// 1 per entry: CTI_NN_OPS(CTI_OP_COUNT) is the family's entry count.
#define CTI_OP_COUNT(...) +1

#endif
