/*
 * The Jinja engine behind chat_jinja.h: an arena, values, the AST, the parser and the evaluator.
 *
 * jinja_parse.c   source -> tokens (trim_blocks, lstrip_blocks, '-' and '+' whitespace control, raw) -> AST
 * jinja_eval.c    AST + variables -> text: statements, expressions, Python/jinja2 semantics of the values
 * jinja_builtins.c  filters, tests, globals and the methods of str, dict and list, jinja2's sandbox rules
 * chat_jinja.c    the request (cJSON) -> variables, as transformers prepares them
 */
#ifndef SY_HOST_CHAT_CHAT_JINJA_INTERNAL_H
#define SY_HOST_CHAT_CHAT_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "chat/chat_jinja.h"

/* ---- arena: everything of one compile or one render, freed at once; bounded ---- */
typedef struct jj_chunk jj_chunk;
typedef struct jj_arena {
    jj_chunk *head;
    size_t used_total;
    size_t limit;
} jj_arena;

/* ---- values ---- */
typedef enum jj_type {
    JJ_UNDEF = 0,
    JJ_NONE,
    JJ_BOOL,
    JJ_INT,
    JJ_FLOAT,
    JJ_STR,
    JJ_LIST,  /* also tuples (list->tuple) */
    JJ_DICT,
    JJ_NS,    /* namespace(): a dict whose attributes may be assigned */
    JJ_LOOP,  /* a for loop's `loop` */
    JJ_MACRO, /* a macro, or a call block's caller */
    JJ_FUNC,  /* a global function (range, namespace, raise_exception, ...) or a bound method */
    JJ_OBJ    /* joiner, cycler */
} jj_type;

typedef struct jj_list jj_list;
typedef struct jj_dict jj_dict;
typedef struct jj_loop jj_loop;
typedef struct jj_macro jj_macro;
typedef struct jj_func jj_func;
typedef struct jj_obj jj_obj;

typedef struct jj_value {
    uint8_t type;
    uint8_t safe; /* unused by rendering (autoescape is off, as in transformers); kept for |safe round trips */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        jj_list *l;
        jj_dict *d;
        jj_loop *loop;
        jj_macro *m;
        jj_func *fn;
        jj_obj *o;
        /* JJ_UNDEF: why it is undefined (jinja2's hint); NULL: a plain missing name */
        struct jj_undef *u;
    } v;
} jj_value;

struct jj_list {
    jj_value *items;
    size_t n, cap;
    bool tuple;
    /* what Python would hold instead of a list: NULL for a list or tuple; "generator" (select, map, items...) and
     * "list_reverseiterator" are always true, have no len() and are no JSON; "dict_items", "dict_keys" and
     * "dict_values" (the dict methods) have a len() but are no JSON either */
    const char *pytype;
};

struct jj_dict {
    jj_value *keys;
    jj_value *vals;
    size_t n, cap;
};

typedef struct jj_undef {
    const char *msg;     /* the message an operation on it raises */
    bool security;       /* a sandbox refusal (SecurityError) */
} jj_undef;

/* ---- AST ---- */
typedef enum jj_node_kind {
    /* expressions */
    JN_CONST, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_GETATTR, JN_GETITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
    JN_UNARY, JN_BINARY, JN_COMPARE, JN_AND, JN_OR, JN_NOT, JN_COND, JN_CONCAT,
    /* statements */
    JN_TEMPLATE_BODY, JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_CALL_BLOCK,
    JN_FILTER_BLOCK, JN_BREAK, JN_CONTINUE, JN_GENERATION, JN_WITH
} jj_node_kind;

typedef struct jj_node jj_node;

typedef struct jj_nodes {
    jj_node **items;
    size_t n;
} jj_nodes;

/* Call arguments: positional, then keyword (names[i] for kwargs). */
typedef struct jj_args {
    jj_nodes pos;
    jj_nodes kw;
    const char **kw_names;
} jj_args;

struct jj_node {
    uint16_t kind;
    uint16_t op;    /* operator token for unary/binary/compare */
    uint32_t line;
    const char *name; /* NAME, GETATTR attribute, FILTER/TEST name, MACRO name, SET target name */
    size_t name_len;
    jj_value value; /* CONST */
    jj_node *a, *b, *c; /* operands; IF: cond, FOR: target(a) iter(b) filter(c); SLICE: start stop step */
    jj_nodes body, else_body; /* statement bodies; LIST/TUPLE/DICT items (dict: key, value pairs in body) */
    jj_args args; /* CALL, FILTER, TEST, CALL_BLOCK caller params in args.pos (names) + defaults in kw */
    jj_nodes ops;  /* COMPARE: operands after the first; op codes in opcodes */
    uint16_t *opcodes;
    /* MACRO: parameter names and defaults (NULL = none) */
    const char **params;
    jj_node **defaults;
    size_t n_params;
    bool negated;   /* TEST: is not */
    bool recursive; /* FOR */
    bool uses_caller;
};

/* Operator codes (also token kinds for punctuation). */
enum {
    JOP_ADD = 1, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_TILDE,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN,
    JOP_NEG, JOP_POS
};

struct sy_chat_jinja {
    jj_arena arena;
    jj_node *root;
    size_t n_nodes;
};

/* ---- the render ---- */
typedef struct jj_frame jj_frame;

typedef struct jj_bufnode {
    sy_buf b;
    struct jj_bufnode *next;
} jj_bufnode;

typedef struct jj_render {
    jj_bufnode *open_bufs; /* output buffers of set blocks and macro calls in flight */
    jj_arena arena;
    sy_buf *out; /* the current output (set blocks and macros redirect it) */
    size_t max_output;
    uint64_t steps, max_steps;
    uint32_t depth, max_depth;
    int64_t now_unix;
    bool now_utc;
    jmp_buf fail;
    char *err;
    size_t err_size;
    uint32_t line; /* of the node being evaluated */
    jj_frame *globals;
    /* the C stack at the render's start: deep nesting (macros calling macros over deep expressions) fails before
     * it uses more than JJ_STACK_BUDGET bytes of the calling thread's stack */
    const char *stack_base;
} jj_render;

#define JJ_STACK_BUDGET ((size_t)1 << 20)

/* arena */
void jj_arena_init(jj_arena *a, size_t limit);
void jj_arena_free(jj_arena *a);
/* NULL when over the limit. */
void *jj_arena_alloc(jj_arena *a, size_t n);
void *jj_ralloc(jj_render *r, size_t n); /* fails the render (longjmp) when over the limit */

/* failing: longjmp out of the render with "chat template line N: message" */
_Noreturn void jj_fail(jj_render *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* a template's own message (raise_exception), exactly */
_Noreturn void jj_fail_raw(jj_render *r, const char *msg, size_t n);

/* parser */
jj_node *jj_parse(sy_chat_jinja *t, const char *src, size_t len, char *err, size_t err_size);

/* values */
jj_value jj_undef_v(void);
jj_value jj_undef_msg(jj_render *r, bool security, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
jj_value jj_none(void);
jj_value jj_bool(bool b);
jj_value jj_int(int64_t i);
jj_value jj_float(double f);
jj_value jj_str(const char *p, size_t n);
jj_value jj_cstr(const char *s);
jj_value jj_str_copy(jj_render *r, const char *p, size_t n);
jj_list *jj_list_new(jj_render *r, size_t cap);
void jj_list_push(jj_render *r, jj_list *l, jj_value v);
jj_value jj_list_v(jj_list *l);
jj_dict *jj_dict_new(jj_render *r, size_t cap);
void jj_dict_set(jj_render *r, jj_dict *d, jj_value key, jj_value val);
/* NULL when absent */
jj_value *jj_dict_get(jj_dict *d, jj_value key);
jj_value *jj_dict_gets(jj_dict *d, const char *key, size_t n);
jj_value jj_dict_v(jj_dict *d);

bool jj_truthy(jj_value v);
bool jj_eq(jj_value a, jj_value b);
/* -1, 0, 1; fails the render on types Python cannot order */
int jj_cmp(jj_render *r, jj_value a, jj_value b);
/* str(v) appended to b (Python's str: repr inside containers) */
void jj_to_str(jj_render *r, sy_buf *b, jj_value v);
jj_value jj_stringify(jj_render *r, jj_value v);
void jj_repr(jj_render *r, sy_buf *b, jj_value v);
const char *jj_type_name(jj_value v); /* Python's type name: str, dict, list, int, ... */
/* iterate: the items of a list/tuple, keys of a dict, characters of a string; undefined: none */
jj_list *jj_iter(jj_render *r, jj_value v);
size_t jj_utf8_len(const char *p, size_t n);
void jj_check_undef(jj_render *r, jj_value v); /* fails with an undefined value's message */

/* attribute and item access as jinja2's sandbox does them */
jj_value jj_getattr(jj_render *r, jj_value obj, const char *name, size_t n);
jj_value jj_getitem(jj_render *r, jj_value obj, jj_value key);

/* builtins (jinja_builtins.c) */
typedef struct jj_callargs {
    jj_value *pos;
    size_t n_pos;
    jj_value *kw;
    const char **kw_names;
    size_t n_kw;
} jj_callargs;

typedef jj_value (*jj_builtin_fn)(jj_render *r, jj_value self, const jj_callargs *a);
struct jj_func {
    const char *name;
    jj_builtin_fn fn;
    jj_value self; /* bound methods: the receiver */
};

jj_value jj_apply_filter(jj_render *r, const char *name, jj_value v, const jj_callargs *a);
bool jj_filter_exists(const char *name);
bool jj_apply_test(jj_render *r, const char *name, jj_value v, const jj_callargs *a);
bool jj_test_exists(const char *name);
jj_value jj_method(jj_render *r, jj_value obj, const char *name, size_t n, bool *found);
void jj_install_globals(jj_render *r, jj_frame *f);
jj_value jj_call_value(jj_render *r, jj_value callee, const jj_callargs *a);
void jj_tojson(jj_render *r, sy_buf *b, jj_value v, const char *indent, size_t indent_len, int level, bool sort_keys,
               const char *item_sep, const char *key_sep, bool ensure_ascii);
bool jj_is_iterator(jj_value v);
jj_value jj_html_escape(jj_render *r, jj_value s);
void jj_py_float(sy_buf *b, double f);
/* a keyword argument by name, or positional index; NULL when neither */
const jj_value *jj_arg(const jj_callargs *a, size_t pos_index, const char *name);

/* frames (jinja_eval.c) */
jj_frame *jj_frame_new(jj_render *r, jj_frame *parent);
void jj_frame_set(jj_render *r, jj_frame *f, const char *name, size_t n, jj_value v);

/* loop object helpers */
jj_value jj_loop_attr(jj_render *r, jj_loop *l, const char *name, size_t n);

/* the render: variables already in r->globals */
int jj_render_template(jj_render *r, const sy_chat_jinja *t);
void jj_render_cleanup(jj_render *r);
/* A scratch buffer freed by jj_buf_end, or by the cleanup when the render fails in between (a longjmp past the
 * function that holds it): every heap buffer of a render is one of these. */
sy_buf *jj_buf_begin(jj_render *r);
void jj_buf_end(jj_render *r, sy_buf *b);
void jj_step(jj_render *r);
void jj_emit(jj_render *r, const char *p, size_t n);

#endif
