/*
** rules.h -- every gradient rule of autograd, one line each:
** AG_RULE(KIND, grad_fn name, backward, saved tensors).
**
** This file is a list, included with AG_RULE defined as each user needs (no
** include guard, as core/device_slots.h): autograd.h makes it the enum
** ag_rule_kind (AG_<KIND>) and the prototypes of the backwards, rules.c the
** table ag_rules[] every node points into.  A recorder names its rule by
** kind (ag_record(out, AG_MUL, ...)); the node then answers to the name
** PyTorch gives it (t.grad_fn, errors) and runs that backward.
**
** KIND is what the node is, one rule per formula, so no backward asks
** which op it belongs to; ops of one formula share a backward (the
** reshapes, the matmuls, amax and amin, the roundings).
** A backward bw_<x> lives in the grad_*.c file its section names.  "saved"
** lists n->saved[0], [1], ... in the order the recorder saves them ("":
** nothing saved); scalars (dims, eps, ...) ride in n->iarg and n->darg,
** set by the recorder beside the formula.  scripts/check-grad-rules.sh
** checks that every backward here is defined and every rule recorded.
** Adding a rule: docs/architecture.md, "Gradient rules".
*/

/* -- Binary elementwise (grad_elementwise.c): the family's recorder saves
** a, b and the output for every op -------------------------------------- */
AG_RULE(ADD,           "AddBackward",           bw_add,           "a, b, out")
AG_RULE(SUB,           "SubBackward",           bw_sub,           "a, b, out")
AG_RULE(MUL,           "MulBackward",           bw_mul,           "a, b, out")
AG_RULE(DIV,           "DivBackward",           bw_div,           "a, b, out")
AG_RULE(POW,           "PowBackward",           bw_pow,           "a, b, out")
AG_RULE(MAXIMUM,       "MaximumBackward",       bw_maximum,       "a, b, out")
AG_RULE(MINIMUM,       "MinimumBackward",       bw_minimum,       "a, b, out")
AG_RULE(FMOD,          "FmodBackward",          bw_fmod,          "a, b, out")
AG_RULE(REMAINDER,     "RemainderBackward",     bw_remainder,     "a, b, out")
AG_RULE(ATAN2,         "Atan2Backward",         bw_atan2,         "a, b, out")

/* -- Unary elementwise (grad_elementwise.c): x and the output, every op ---- */
AG_RULE(NEG,           "NegBackward",           bw_neg,           "x, out")
AG_RULE(ABS,           "AbsBackward",           bw_abs,           "x, out")
AG_RULE(EXP,           "ExpBackward",           bw_exp,           "x, out")
AG_RULE(LOG,           "LogBackward",           bw_log,           "x, out")
AG_RULE(LOG2,          "Log2Backward",          bw_log2,          "x, out")
AG_RULE(LOG1P,         "Log1PBackward",         bw_log1p,         "x, out")
AG_RULE(EXPM1,         "Expm1Backward",         bw_expm1,         "x, out")
AG_RULE(SQRT,          "SqrtBackward",          bw_sqrt,          "x, out")
AG_RULE(RSQRT,         "RsqrtBackward",         bw_rsqrt,         "x, out")
AG_RULE(RECIPROCAL,    "ReciprocalBackward",    bw_reciprocal,    "x, out")
AG_RULE(SQUARE,        "PowBackward",           bw_square,        "x, out")
AG_RULE(SIN,           "SinBackward",           bw_sin,           "x, out")
AG_RULE(COS,           "CosBackward",           bw_cos,           "x, out")
AG_RULE(TANH,          "TanhBackward",          bw_tanh,          "x, out")
AG_RULE(SIGMOID,       "SigmoidBackward",       bw_sigmoid,       "x, out")
AG_RULE(RELU,          "ReluBackward",          bw_relu,          "x, out")
AG_RULE(GELU,          "GeluBackward",          bw_gelu,          "x, out")
AG_RULE(GELU_TANH,     "GeluBackward",          bw_gelu_tanh,     "x, out")
AG_RULE(SILU,          "SiluBackward",          bw_silu,          "x, out")
AG_RULE(SIGN,          "SignBackward",          bw_zero,          "x, out")
AG_RULE(FLOOR,         "FloorBackward",         bw_zero,          "x, out")
AG_RULE(CEIL,          "CeilBackward",          bw_zero,          "x, out")
AG_RULE(ROUND,         "RoundBackward",         bw_zero,          "x, out")
AG_RULE(TRUNC,         "TruncBackward",         bw_zero,          "x, out")

/* -- Clamp, where, casts (grad_elementwise.c) ------------------------------ */
AG_RULE(CLAMP,         "ClampBackward",         bw_clamp,         "x")
AG_RULE(WHERE,         "WhereBackward",         bw_where,         "cond")
AG_RULE(TO_COPY,       "ToCopyBackward",        bw_identity,      "")

/* -- Views (grad_view.c) ----------------------------------------------------- */
AG_RULE(VIEW,          "ViewBackward",          bw_reshape,       "")
AG_RULE(RESHAPE,       "ReshapeBackward",       bw_reshape,       "")
AG_RULE(SQUEEZE,       "SqueezeBackward",       bw_reshape,       "")
AG_RULE(UNSQUEEZE,     "UnsqueezeBackward",     bw_reshape,       "")
AG_RULE(FLATTEN,       "FlattenBackward",       bw_reshape,       "")
AG_RULE(EXPAND,        "ExpandBackward",        bw_identity,      "")
AG_RULE(TRANSPOSE,     "TransposeBackward",     bw_transpose,     "")
AG_RULE(PERMUTE,       "PermuteBackward",       bw_permute,       "")
AG_RULE(NARROW,        "NarrowBackward",        bw_narrow,        "")
AG_RULE(SELECT,        "SelectBackward",        bw_select,        "")

/* -- Products, indexing, masks, joins (grad_linalg_index.c) ------------------ */
AG_RULE(MATMUL,        "MatmulBackward",        bw_matmul,        "a, b")
AG_RULE(MM,            "MmBackward",            bw_matmul,        "a, b")
AG_RULE(BMM,           "BmmBackward",           bw_matmul,        "a, b")
AG_RULE(DOT,           "DotBackward",           bw_matmul,        "a, b")
AG_RULE(OUTER,         "OuterBackward",         bw_outer,         "a, b")
AG_RULE(ADDMM,         "AddmmBackward",         bw_addmm,         "a, b")
AG_RULE(INDEX_SELECT,  "IndexSelectBackward",   bw_index_select,  "index")
AG_RULE(GATHER,        "GatherBackward",        bw_gather,        "index")
AG_RULE(SCATTER,       "ScatterBackward",       bw_scatter,       "index")
AG_RULE(SCATTER_ADD,   "ScatterAddBackward",    bw_scatter_add,   "index")
AG_RULE(MASKED_FILL,   "MaskedFillBackward",    bw_masked_fill,   "mask")
AG_RULE(MASKED_SELECT, "MaskedSelectBackward",  bw_masked_select, "mask")
AG_RULE(CAT,           "CatBackward",           bw_cat,           "")
AG_RULE(STACK,         "StackBackward",         bw_stack,         "")

/* -- Reductions (grad_reduce.c) ---------------------------------------------- */
AG_RULE(SUM,           "SumBackward",           bw_sum,           "x, out")
AG_RULE(MEAN,          "MeanBackward",          bw_mean,          "x, out")
AG_RULE(PROD,          "ProdBackward",          bw_prod,          "x, out")
AG_RULE(AMAX,          "AmaxBackward",          bw_extreme,       "x, out")
AG_RULE(AMIN,          "AminBackward",          bw_extreme,       "x, out")
AG_RULE(VAR,           "VarBackward",           bw_var,           "x, out")
AG_RULE(STD,           "StdBackward",           bw_std,           "x, out")
AG_RULE(NORM,          "NormBackward",          bw_norm,          "x, out")

/* -- Softmax's family, the normalised exponentials along dims (grad_reduce.c):
** log_softmax(x) = x - logsumexp(x), logsumexp's gradient is g * softmax(x) */
AG_RULE(LOGSUMEXP,     "LogsumexpBackward",     bw_logsumexp,     "x, out")
AG_RULE(SOFTMAX,       "SoftmaxBackward",       bw_softmax,       "x, out")
AG_RULE(LOG_SOFTMAX,   "LogSoftmaxBackward",    bw_log_softmax,   "x, out")

/* -- Values with their indices, scans, triangles (grad_reduce.c) ------------- */
AG_RULE(MAX,           "MaxBackward",           bw_indices,       "indices")
AG_RULE(MIN,           "MinBackward",           bw_indices,       "indices")
AG_RULE(SORT,          "SortBackward",          bw_indices,       "indices")
AG_RULE(TOPK,          "TopkBackward",          bw_indices,       "indices")
AG_RULE(CUMSUM,        "CumsumBackward",        bw_cumsum,        "x, out")
AG_RULE(CUMPROD,       "CumprodBackward",       bw_cumprod,       "x, out")
AG_RULE(TRIL,          "TrilBackward",          bw_tril,          "")
AG_RULE(TRIU,          "TriuBackward",          bw_triu,          "")

/* -- Network ops (grad_nn.c): each backward calls its nn/ kernel ------------- */
AG_RULE(LINEAR,        "LinearBackward",        bw_linear,        "x, w")
AG_RULE(CONV2D,        "ConvolutionBackward",   bw_conv2d,        "x, w")
AG_RULE(MAX_POOL2D,    "MaxPool2DWithIndicesBackward", bw_max_pool2d, "x, indices")
AG_RULE(AVG_POOL2D,    "AvgPool2DBackward",     bw_avg_pool2d,    "x")
AG_RULE(EMBEDDING,     "EmbeddingBackward",     bw_embedding,     "indices")
AG_RULE(LAYER_NORM,    "NativeLayerNormBackward", bw_layer_norm,  "x, w, mean, rstd")
AG_RULE(BATCH_NORM,    "NativeBatchNormBackward", bw_batch_norm,  "x, w, mean, invstd")
AG_RULE(DROPOUT,       "NativeDropoutBackward", bw_dropout,       "mask")
AG_RULE(SDPA,          "ScaledDotProductAttentionBackward", bw_sdpa, "q, k, v, attn_mask, out, lse")
AG_RULE(CROSS_ENTROPY, "CrossEntropyLossBackward", bw_cross_entropy, "logits, target, weight")
AG_RULE(NLL_LOSS,      "NllLossBackward",       bw_nll_loss,      "logp, target, weight")
AG_RULE(MSE_LOSS,      "MseLossBackward",       bw_mse_loss,      "input, target")

/* -- Ops of layers above autograd, which calls nothing above it: their
** recorder hands the node its backward (n->backward), which bw_from_recorder
** (rules.c) runs -------------------------------------------------------------- */
AG_RULE(ALL_REDUCE,    "AllReduceBackward",     bw_from_recorder, "")  /* dist/pg_autograd.c */

/* -- A checkpointed forward (checkpoint.c): its backward recomputes it, which
** the caller of the pass does (ddp.checkpoint in Lua): pass.c pauses at it -- */
AG_RULE(CHECKPOINT,    "CheckpointBackward",    bw_checkpoint,    "")
