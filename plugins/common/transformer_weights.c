/* See transformer_weights.h. */
#include "transformer_weights.h"

#include "errmsg.h"

bool sy_tf_check_matrix(const sy_tf_matrix *w, const char *fallback_name, uint64_t rows, uint64_t cols, char *err,
                        size_t err_size) {
    const char *name = w->name ? w->name : fallback_name;
    if (w->data == NULL) {
        sy_errmsg(err, err_size, "tensor %s is missing", name);
        return false;
    }
    if (w->rows != rows || w->cols != cols) {
        sy_errmsg(err, err_size, "tensor %s: shape %llu x %llu, expected %llu x %llu", name,
                  (unsigned long long)w->rows, (unsigned long long)w->cols, (unsigned long long)rows,
                  (unsigned long long)cols);
        return false;
    }
    if (!sy_matmul_supports(w->type)) {
        const sy_dtype_traits *t = sy_dtype_get(w->type);
        sy_errmsg(err, err_size, "tensor %s: type %s is not supported for matrix products", name,
                  t ? t->name : "unknown");
        return false;
    }
    size_t packed = sy_dtype_row_bytes(w->type, cols);
    if (packed == 0 || w->row_bytes < packed) {
        sy_errmsg(err, err_size, "tensor %s: rows of %zu bytes cannot hold %llu elements", name, w->row_bytes,
                  (unsigned long long)cols);
        return false;
    }
    return true;
}
