/*
 * test-engine: "sy.engine.state/1". A chunk [begin, end) is the KV rows of those positions (position-major, then
 * layer, 8 little-endian F16 each), followed with recurrent=1 by the 32-byte recurrent state after end tokens.
 */
#include <string.h>

#include "te_internal.h"

/* Chunks move through the host's callbacks in pieces of at most this many positions, as a real engine streaming
 * layer by layer would; hosts must not assume one call per chunk. */
#define TE_STATE_PIECE_POSITIONS 256u

static sy_status te_state_info(const sy_model *model, sy_state_info *out) {
    if (!te_model_ok(model) || out == NULL || out->struct_size < sizeof(uint32_t))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "state_info: model or out is NULL, or out's struct_size is too small");
    sy_state_info info = {
        .struct_size = sizeof info,
        .layout = model->cfg.recurrent ? "test-kv-f16-recurrent-v1" : "test-kv-f16-v1",
        .element_size = 2,
        .kv_bytes_per_token = model->kv_bytes_per_token,
        .recurrent_bytes = model->cfg.recurrent ? TE_RECURRENT_BYTES : 0,
    };
    uint32_t size = out->struct_size < sizeof info ? out->struct_size : (uint32_t)sizeof info;
    memcpy((char *)out + sizeof(uint32_t), (const char *)&info + sizeof(uint32_t), size - sizeof(uint32_t));
    return SY_OK;
}

static uint64_t te_state_chunk_bytes(const sy_model *model, uint32_t n_positions) {
    if (!te_model_ok(model)) return 0;
    return (uint64_t)n_positions * model->kv_bytes_per_token + (model->cfg.recurrent ? TE_RECURRENT_BYTES : 0);
}

static sy_status te_state_save_chunk(sy_model *model, const sy_seq *seq, uint32_t begin, uint32_t end,
                                     const sy_state_writer *writer) {
    if (!te_seq_ok(model, seq))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "state_save_chunk: not a sequence of this model");
    if (!SY_HAS_FIELD(writer, sy_state_writer, write) || writer->write == NULL)
        return te_fail(SY_ERR_INVALID_ARGUMENT, "state_save_chunk: writer is NULL or incomplete");
    if (begin >= end || end > seq->len)
        return te_fail(SY_ERR_INVALID_ARGUMENT, "state_save_chunk: chunk [%u, %u) is not inside the %u tokens held",
                       (unsigned)begin, (unsigned)end, (unsigned)seq->len);
    if (model->cfg.recurrent && !seq->rec_known[end])
        return te_fail(SY_ERR_UNSUPPORTED,
                       "state_save_chunk: the recurrent state after %u tokens is not known (restored from a chunk "
                       "ending elsewhere)",
                       (unsigned)end);
    const size_t stride = model->kv_bytes_per_token;
    for (uint32_t pos = begin; pos < end;) {
        uint32_t n = end - pos < TE_STATE_PIECE_POSITIONS ? end - pos : TE_STATE_PIECE_POSITIONS;
        sy_status st = writer->write(writer->user, seq->kv + (size_t)pos * stride, (size_t)n * stride);
        if (st != SY_OK) return te_fail(st, "state_save_chunk: the host's writer failed (status %d)", (int)st);
        pos += n;
    }
    if (model->cfg.recurrent) {
        sy_status st = writer->write(writer->user, seq->rec + (size_t)end * TE_RECURRENT_BYTES, TE_RECURRENT_BYTES);
        if (st != SY_OK) return te_fail(st, "state_save_chunk: the host's writer failed (status %d)", (int)st);
    }
    return SY_OK;
}

static sy_status te_state_load_chunk(sy_model *model, sy_seq *seq, uint32_t begin, uint32_t end,
                                     const int32_t *tokens, const sy_state_reader *reader) {
    if (!te_seq_ok(model, seq))
        return te_fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: not a sequence of this model");
    if (!SY_HAS_FIELD(reader, sy_state_reader, read) || reader->read == NULL)
        return te_fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: reader is NULL or incomplete");
    if (seq->len != begin)
        return te_fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: chunk begins at %u but the sequence holds %u tokens",
                       (unsigned)begin, (unsigned)seq->len);
    if (begin >= end) return te_fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: empty chunk [%u, %u)", (unsigned)begin,
                                     (unsigned)end);
    if (end > model->cfg.n_ctx)
        return te_fail(SY_ERR_CONTEXT_FULL, "state_load_chunk: chunk end %u exceeds the context of %u", (unsigned)end,
                       (unsigned)model->cfg.n_ctx);
    if (tokens == NULL) return te_fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: tokens is NULL");
    for (uint32_t k = 0; k < end - begin; k++)
        if (tokens[k] < 0 || (uint32_t)tokens[k] >= model->cfg.n_vocab)
            return te_fail(SY_ERR_INVALID_ARGUMENT, "state_load_chunk: token %ld at %u is outside the vocabulary of %u",
                           (long)tokens[k], (unsigned)(begin + k), (unsigned)model->cfg.n_vocab);
    sy_status st = te_seq_reserve(model, seq, end);
    if (st != SY_OK) return st;

    /* Read into the positions past the length; they count only once everything has arrived. */
    const size_t stride = model->kv_bytes_per_token;
    for (uint32_t pos = begin; pos < end;) {
        uint32_t n = end - pos < TE_STATE_PIECE_POSITIONS ? end - pos : TE_STATE_PIECE_POSITIONS;
        st = reader->read(reader->user, seq->kv + (size_t)pos * stride, (size_t)n * stride);
        if (st != SY_OK) return te_fail(st, "state_load_chunk: the host's reader failed (status %d)", (int)st);
        pos += n;
    }
    uint8_t state[TE_RECURRENT_BYTES];
    if (model->cfg.recurrent) {
        st = reader->read(reader->user, state, sizeof state);
        if (st != SY_OK) return te_fail(st, "state_load_chunk: the host's reader failed (status %d)", (int)st);
    }
    memcpy(seq->tokens + begin, tokens, (size_t)(end - begin) * sizeof *tokens);
    if (model->cfg.recurrent) {
        memcpy(seq->rec + (size_t)end * TE_RECURRENT_BYTES, state, sizeof state);
        memset(seq->rec_known + begin + 1, 0, end - begin - 1);
        seq->rec_known[end] = 1;
    }
    te_seq_set_length(model, seq, end);
    return SY_OK;
}

#if SY_ABI_TARGET_MINOR >= 2
/* The layout name carries the chunk format; every 0.x build of this engine writes it the same way, so a snapshot of
 * another 0.x version reads as it is. Another layout (the other kind of model) or another major does not. */
static int te_state_can_read(const sy_model *model, const char *layout, const char *writer_version) {
    sy_state_info info = {.struct_size = sizeof info};
    if (layout == NULL || writer_version == NULL || te_state_info(model, &info) != SY_OK) return 0;
    return strcmp(layout, info.layout) == 0 && strncmp(writer_version, "0.", 2) == 0;
}
#endif

const sy_engine_state_api te_state_api = {
    .struct_size = sizeof(sy_engine_state_api),
    .state_info = te_state_info,
    .state_chunk_bytes = te_state_chunk_bytes,
    .state_save_chunk = te_state_save_chunk,
    .state_load_chunk = te_state_load_chunk,
#if SY_ABI_TARGET_MINOR >= 2
    .state_can_read = te_state_can_read,
#endif
};
