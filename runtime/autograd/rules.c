/*
** rules.c -- the table of gradient rules, made from the list in rules.h:
** ag_rules[AG_<KIND>] is what a node of that kind is (its grad_fn name,
** its backward, what it saves).  A backward missing from the grad_*.c files
** fails the link, and a kind listed twice does not compile.
*/
#include "autograd/autograd.h"

DL_HIDDEN const ag_rule ag_rules[AG_NRULES] = {
#define AG_RULE(kind, name, backward, saved) [AG_##kind] = {AG_##kind, name, backward, saved},
#include "autograd/rules.h"
#undef AG_RULE
};

/* The backward of a rule whose op lives in a layer above autograd (dist's
** all-reduce): its recorder set n->backward, so autograd calls nothing
** above it but through the node. */
DL_HIDDEN int bw_from_recorder(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  if (!n->backward) return dl_err(EM_AG_NODIFF, n->rule->name);
  return n->backward(n, g, gin);
}
