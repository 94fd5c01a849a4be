/* The radix tree behind the host prefix cache (see prefix_cache.h). */
#include "engine/prefix_cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

typedef struct pc_node {
    int32_t *label; /* the tokens on the edge from the parent; owned */
    uint32_t label_len;
    struct pc_node *parent;
    struct pc_node **children;
    uint32_t n_children, cap_children;
    sy_prefix_entry *entries; /* entries whose tokens end exactly here */
    size_t n_below;           /* entries in this subtree, these included; > 0 for every node but the root */
} pc_node;

struct sy_prefix_entry {
    pc_node *node;
    int32_t *tokens;
    uint32_t n;
    void *value;
    sy_prefix_entry *prev, *next;
};

struct sy_prefix_cache {
    pc_node root;
    size_t count;
};

sy_prefix_cache *sy_prefix_cache_create(void) { return sy_xcalloc(1, sizeof(sy_prefix_cache)); }

static void free_subtree(pc_node *node) {
    for (uint32_t i = 0; i < node->n_children; i++) {
        free_subtree(node->children[i]);
        free(node->children[i]);
    }
    for (sy_prefix_entry *e = node->entries, *next; e != NULL; e = next) {
        next = e->next;
        free(e->tokens);
        free(e);
    }
    free(node->children);
    free(node->label);
}

void sy_prefix_cache_free(sy_prefix_cache *pc) {
    if (pc == NULL) return;
    free_subtree(&pc->root);
    free(pc);
}

static uint32_t common_length(const int32_t *a, uint32_t na, const int32_t *b, uint32_t nb) {
    uint32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static pc_node *find_child(const pc_node *node, int32_t token) {
    for (uint32_t i = 0; i < node->n_children; i++)
        if (node->children[i]->label[0] == token) return node->children[i];
    return NULL;
}

static void add_child(pc_node *node, pc_node *child) {
    if (node->n_children == node->cap_children) {
        node->cap_children = node->cap_children ? node->cap_children * 2 : 2;
        node->children = sy_xrealloc(node->children, node->cap_children * sizeof *node->children);
    }
    node->children[node->n_children++] = child;
    child->parent = node;
}

static void drop_child(pc_node *node, const pc_node *child) {
    for (uint32_t i = 0; i < node->n_children; i++) {
        if (node->children[i] == child) {
            node->children[i] = node->children[--node->n_children];
            return;
        }
    }
}

static pc_node *new_node(const int32_t *label, uint32_t len) {
    pc_node *node = sy_xcalloc(1, sizeof *node);
    node->label = sy_xmalloc((size_t)(len ? len : 1) * sizeof *node->label);
    memcpy(node->label, label, (size_t)len * sizeof *label);
    node->label_len = len;
    return node;
}

/* Splits `node`'s edge after k tokens (0 < k < label_len): node keeps the first k, a new child takes the rest
 * with everything node had below. */
static void split(pc_node *node, uint32_t k) {
    pc_node *rest = new_node(node->label + k, node->label_len - k);
    rest->children = node->children;
    rest->n_children = node->n_children;
    rest->cap_children = node->cap_children;
    for (uint32_t i = 0; i < rest->n_children; i++) rest->children[i]->parent = rest;
    rest->entries = node->entries;
    for (sy_prefix_entry *e = rest->entries; e != NULL; e = e->next) e->node = rest;
    rest->n_below = node->n_below;
    node->children = NULL;
    node->n_children = node->cap_children = 0;
    node->entries = NULL;
    node->label_len = k;
    add_child(node, rest);
}

sy_prefix_entry *sy_prefix_cache_insert(sy_prefix_cache *pc, const int32_t *tokens, uint32_t n, void *value) {
    pc_node *node = &pc->root;
    uint32_t pos = 0;
    while (pos < n) {
        pc_node *child = find_child(node, tokens[pos]);
        if (child == NULL) {
            child = new_node(tokens + pos, n - pos);
            add_child(node, child);
            node = child;
            pos = n;
            break;
        }
        uint32_t common = common_length(child->label, child->label_len, tokens + pos, n - pos);
        if (common < child->label_len) split(child, common);
        node = child;
        pos += common;
    }
    sy_prefix_entry *e = sy_xcalloc(1, sizeof *e);
    e->node = node;
    e->n = n;
    e->value = value;
    e->tokens = sy_xmalloc((size_t)(n ? n : 1) * sizeof *e->tokens);
    memcpy(e->tokens, tokens, (size_t)n * sizeof *tokens);
    e->next = node->entries;
    if (node->entries != NULL) node->entries->prev = e;
    node->entries = e;
    for (pc_node *x = node; x != NULL; x = x->parent) x->n_below++;
    pc->count++;
    return e;
}

/* A node without entries and with one child is folded into that child's edge, keeping the tree compressed. */
static void merge_with_only_child(pc_node *node) {
    if (node->parent == NULL || node->entries != NULL || node->n_children != 1) return;
    pc_node *child = node->children[0];
    uint32_t len = node->label_len + child->label_len;
    int32_t *label = sy_xmalloc((size_t)len * sizeof *label);
    memcpy(label, node->label, (size_t)node->label_len * sizeof *label);
    memcpy(label + node->label_len, child->label, (size_t)child->label_len * sizeof *label);
    free(child->label);
    child->label = label;
    child->label_len = len;
    pc_node *parent = node->parent;
    for (uint32_t i = 0; i < parent->n_children; i++)
        if (parent->children[i] == node) parent->children[i] = child;
    child->parent = parent;
    free(node->children);
    free(node->label);
    free(node);
}

void sy_prefix_cache_remove(sy_prefix_cache *pc, sy_prefix_entry *e) {
    if (pc == NULL || e == NULL) return;
    pc_node *node = e->node;
    if (e->prev != NULL) e->prev->next = e->next;
    else node->entries = e->next;
    if (e->next != NULL) e->next->prev = e->prev;
    for (pc_node *x = node; x != NULL; x = x->parent) x->n_below--;
    free(e->tokens);
    free(e);
    pc->count--;
    /* Nodes with nothing below them go; then the path is compressed again where it can be. */
    while (node->parent != NULL && node->n_below == 0) {
        pc_node *parent = node->parent;
        drop_child(parent, node);
        free(node->children);
        free(node->label);
        free(node);
        node = parent;
    }
    merge_with_only_child(node);
}

/* The entry below `node` with the fewest tokens. */
static void shortest_below(const pc_node *node, sy_prefix_entry **best) {
    for (sy_prefix_entry *e = node->entries; e != NULL; e = e->next)
        if (*best == NULL || e->n < (*best)->n) *best = e;
    for (uint32_t i = 0; i < node->n_children; i++) shortest_below(node->children[i], best);
}

uint32_t sy_prefix_cache_longest(const sy_prefix_cache *pc, const int32_t *tokens, uint32_t n,
                                 sy_prefix_entry **entry) {
    if (entry != NULL) *entry = NULL;
    if (pc == NULL || pc->count == 0) return 0;
    const pc_node *node = &pc->root;
    uint32_t pos = 0;
    while (pos < n) {
        const pc_node *child = find_child(node, tokens[pos]);
        if (child == NULL) break;
        uint32_t common = common_length(child->label, child->label_len, tokens + pos, n - pos);
        pos += common;
        node = child; /* a partial edge still leads only to entries sharing those tokens */
        if (common < child->label_len) break;
    }
    if (pos == 0) return 0;
    if (entry != NULL) shortest_below(node, entry);
    return pos;
}

void *sy_prefix_entry_value(const sy_prefix_entry *entry) { return entry->value; }
uint32_t sy_prefix_entry_length(const sy_prefix_entry *entry) { return entry->n; }
const int32_t *sy_prefix_entry_tokens(const sy_prefix_entry *entry) { return entry->tokens; }
size_t sy_prefix_cache_count(const sy_prefix_cache *pc) { return pc ? pc->count : 0; }
