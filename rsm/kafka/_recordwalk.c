/*
 * The record walk of Kafka v2 batches, from the decompressed records straight into Arrow column buffers.
 *
 * Why C: in Python the walk and the per-row objects it builds (then copied again into Arrow) cost several
 * times the decompression itself. Here one pass frames each record, applies the read's offset and time bounds,
 * and appends the fields the read asks for to growable buffers laid out as Arrow wants them (int64 offsets
 * and timestamps, int32 timestamp types, binary keys and values with validity bitmaps, and headers as
 * list<struct<key: string, value: binary>>). The buffers leave as Memory objects (the buffer protocol),
 * which pyarrow wraps without copying; nothing here needs pyarrow or numpy.
 *
 * The walk is the exact twin of the Python walk in rsm/kafka/python_walk.py (append_v2_records): every
 * record it keeps, and every batch it refuses, is one the Python walk keeps or refuses, so the two can be
 * tested against each other on hostile bytes. Rules shared with it:
 *   - varints are Kafka's zigzag varints: int32 fields at most 5 bytes and 32 bits, int64 fields at most
 *     10 bytes and 64 bits; header counts and header lengths are read as int64 (as the Python walk does);
 *   - a record's length must be > 0 and end inside the records; its attributes are one byte, any value;
 *   - reads of a record's fields are bounded by the end of the records, not of the record: a record outside
 *     the bounds is skipped after its offset delta without checking where its fields end (as the Python walk
 *     does); a kept record's key and value must end inside it, and its headers (when read) exactly at its end;
 *   - any negative key or value length is null; a header key is never null and must be UTF-8 (Python's strict
 *     decoder decides);
 *   - an offset above int64 is outside every bound; a kept record whose timestamp leaves int64 is damage;
 *   - the records must end exactly after `count` records.
 * A refused batch leaves the builder as it was before the batch (no partial rows).
 *
 * Safety on crafted input: every byte read is checked against the end of the records; every length is
 * compared with the bytes left before it is added to a position; memory grows only with rows and bytes
 * actually kept (bounded by the records' own size), never with a count or length read from the input; each
 * record advances the walk by at least two bytes, so a walk ends within len(records) / 2 records.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define ARROW_INT32_MAX ((Py_ssize_t)0x7FFFFFFF)

/* ------------------------------------------------------------------------------------------------------ */
/* Memory: bytes owned by Python, exported read-only through the buffer protocol                          */
/* ------------------------------------------------------------------------------------------------------ */

/* Large blocks are kept for reuse once the batch that held them is gone: each Arrow batch otherwise gets fresh
 * memory from the system, and faulting its pages in cost more than the walk itself (a batch of 8192 rows of
 * 400-byte values is 3.3 MB). A few blocks, a bounded number of bytes; all under the GIL. */
#define POOL_SLOTS 16
#define POOL_MIN_BLOCK ((Py_ssize_t)64 << 10)
#define POOL_MAX_BYTES ((Py_ssize_t)64 << 20)

static struct {
    char *p;
    Py_ssize_t cap;
} pool[POOL_SLOTS];
static int pool_count;
static Py_ssize_t pool_bytes;

/* A kept block of at least `need` bytes and not far more (so small buffers leave big blocks for big ones). */
static char *
pool_take(Py_ssize_t need, Py_ssize_t *cap)
{
    int best = -1;
    for (int i = 0; i < pool_count; i++)
        if (pool[i].cap >= need && pool[i].cap / 8 <= need && (best < 0 || pool[i].cap < pool[best].cap))
            best = i;
    if (best < 0)
        return NULL;
    char *p = pool[best].p;
    *cap = pool[best].cap;
    pool_bytes -= *cap;
    pool[best] = pool[--pool_count];
    return p;
}

/* Keep a block for reuse, or free it. */
static void
pool_give(char *p, Py_ssize_t cap)
{
    if (p == NULL)
        return;
    if (cap >= POOL_MIN_BLOCK && pool_count < POOL_SLOTS && cap <= POOL_MAX_BYTES - pool_bytes) {
        pool[pool_count].p = p;
        pool[pool_count].cap = cap;
        pool_count++;
        pool_bytes += cap;
        return;
    }
    PyMem_Free(p);
}

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t size;
    Py_ssize_t cap;
} Memory;

static char empty_bytes[8];

static void
Memory_dealloc(Memory *self)
{
    pool_give(self->data, self->cap);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Memory_getbuffer(Memory *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : empty_bytes, self->size, 1, flags);
}

static Py_ssize_t
Memory_length(Memory *self)
{
    return self->size;
}

static PyBufferProcs Memory_as_buffer = {(getbufferproc)Memory_getbuffer, NULL};
static PySequenceMethods Memory_as_sequence = {.sq_length = (lenfunc)Memory_length};

static PyTypeObject MemoryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rsm.kafka._recordwalk.Memory",
    .tp_doc = "Bytes of one column buffer, read-only through the buffer protocol (pyarrow.py_buffer wraps it).",
    .tp_basicsize = sizeof(Memory),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Memory_dealloc,
    .tp_as_buffer = &Memory_as_buffer,
    .tp_as_sequence = &Memory_as_sequence,
};

/* ------------------------------------------------------------------------------------------------------ */
/* Growable buffers                                                                                       */
/* ------------------------------------------------------------------------------------------------------ */

typedef struct {
    char *p;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

static int
buf_grow(Buf *b, Py_ssize_t extra)
{
    if (extra > PY_SSIZE_T_MAX - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t need = b->len + extra;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    if (cap >= POOL_MIN_BLOCK) {
        Py_ssize_t kept;
        char *p = pool_take(need, &kept);
        if (p != NULL) {
            if (b->len)
                memcpy(p, b->p, (size_t)b->len);
            pool_give(b->p, b->cap);
            b->p = p;
            b->cap = kept;
            return 0;
        }
    }
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static void
buf_free(Buf *b)
{
    pool_give(b->p, b->cap);
    b->p = NULL;
    b->len = b->cap = 0;
}

static inline int
buf_reserve(Buf *b, Py_ssize_t extra)
{
    return extra <= b->cap - b->len ? 0 : buf_grow(b, extra);
}

/* Appends without a capacity check: the caller reserved room first. */
static inline void
put_i64(Buf *b, int64_t v)
{
    memcpy(b->p + b->len, &v, 8);
    b->len += 8;
}

static inline void
put_i32(Buf *b, int32_t v)
{
    memcpy(b->p + b->len, &v, 4);
    b->len += 4;
}

static inline int32_t
last_i32(const Buf *b)
{
    int32_t v;
    memcpy(&v, b->p + b->len - 4, 4);
    return v;
}

/* Hands the bytes over to a Memory object and leaves the buffer empty. A block that will not go back to the
 * pool is trimmed to its contents (a batch kept for long holds no slack). */
static PyObject *
buf_release(Buf *b)
{
    Memory *m = PyObject_New(Memory, &MemoryType);
    if (m == NULL)
        return NULL;
    if (b->len == 0) {
        buf_free(b);
    } else if (b->cap < POOL_MIN_BLOCK && b->len < b->cap) {
        char *p = PyMem_Realloc(b->p, (size_t)b->len);
        if (p != NULL) {
            b->p = p;
            b->cap = b->len;
        }
    }
    m->data = b->p;
    m->size = b->len;
    m->cap = b->cap;
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)m;
}

static PyObject *
buf_copy(const Buf *b)
{
    return PyBytes_FromStringAndSize(b->len ? b->p : empty_bytes, b->len);
}

/* ------------------------------------------------------------------------------------------------------ */
/* Variable-width columns: Arrow binary/string layout (validity bitmap, int32 offsets, data)              */
/* ------------------------------------------------------------------------------------------------------ */

typedef struct {
    Buf valid;   /* one bit per item, LSB first; (items + 7) / 8 bytes */
    Buf offsets; /* int32, items + 1 entries */
    Buf data;
    Py_ssize_t items;
    Py_ssize_t nulls;
} VarColumn;

typedef struct {
    Py_ssize_t valid, offsets, data, items, nulls;
} VarMark;

static int
var_init(VarColumn *c)
{
    if (buf_reserve(&c->offsets, 4) < 0)
        return -1;
    put_i32(&c->offsets, 0);
    return 0;
}

static void
var_free(VarColumn *c)
{
    buf_free(&c->valid);
    buf_free(&c->offsets);
    buf_free(&c->data);
    memset(c, 0, sizeof(*c));
}

/* Room for `items` more entries in the fixed-width parts (offsets and bitmap). */
static int
var_reserve(VarColumn *c, Py_ssize_t items)
{
    if (buf_reserve(&c->offsets, items * 4) < 0)
        return -1;
    return buf_reserve(&c->valid, items / 8 + 1);
}

static inline void
var_mark(const VarColumn *c, VarMark *m)
{
    m->valid = c->valid.len;
    m->offsets = c->offsets.len;
    m->data = c->data.len;
    m->items = c->items;
    m->nulls = c->nulls;
}

static inline void
var_rollback(VarColumn *c, const VarMark *m)
{
    c->valid.len = m->valid;
    c->offsets.len = m->offsets;
    c->data.len = m->data;
    c->items = m->items;
    c->nulls = m->nulls;
    if ((c->items & 7) && c->valid.len > 0) /* clear the bits of the dropped items in the last bitmap byte */
        c->valid.p[c->valid.len - 1] &= (char)((1u << (c->items & 7)) - 1);
}

static int
too_big(const char *what)
{
    PyErr_Format(PyExc_OverflowError,
                 "the %s of one Arrow batch would pass 2 GiB, the most an Arrow binary column holds: read with a "
                 "smaller rowsPerBatch or maxBatchBytes",
                 what);
    return -1;
}

/* Appends one item (NULL `src` = null); `nullable` columns keep a bitmap. Room for the offset and the
 * bitmap byte was reserved by var_reserve. */
static inline int
var_append(VarColumn *c, const uint8_t *src, Py_ssize_t n, int nullable, const char *what)
{
    if (nullable) {
        Py_ssize_t i = c->items;
        if ((i & 7) == 0)
            c->valid.p[c->valid.len++] = 0;
        if (src != NULL)
            c->valid.p[i >> 3] |= (char)(1u << (i & 7));
        else
            c->nulls++;
    }
    if (src != NULL && n > 0) {
        if (n > ARROW_INT32_MAX - c->data.len)
            return too_big(what);
        if (buf_reserve(&c->data, n) < 0)
            return -1;
        memcpy(c->data.p + c->data.len, src, (size_t)n);
        c->data.len += n;
    }
    put_i32(&c->offsets, (int32_t)c->data.len);
    c->items++;
    return 0;
}

/* ------------------------------------------------------------------------------------------------------ */
/* The builder                                                                                            */
/* ------------------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    int want_keys, want_values, want_headers, want_details;
    Py_ssize_t rows;
    Buf offsets;    /* int64 */
    Buf timestamps; /* int64, milliseconds */
    Buf types;      /* int32 */
    Buf attributes; /* int32, the record's attributes byte (details only) */
    Buf ts_deltas;  /* int64, the record's timestamp delta as written (details only) */
    VarColumn keys, values;
    Buf header_lists; /* int32 offsets into the header entries, rows + 1 */
    VarColumn header_keys, header_values;
} Builder;

typedef struct {
    Py_ssize_t rows, offsets, timestamps, types, attributes, ts_deltas, header_lists;
    VarMark keys, values, header_keys, header_values;
} Mark;

static void
builder_mark(const Builder *b, Mark *m)
{
    m->rows = b->rows;
    m->offsets = b->offsets.len;
    m->timestamps = b->timestamps.len;
    m->types = b->types.len;
    m->attributes = b->attributes.len;
    m->ts_deltas = b->ts_deltas.len;
    m->header_lists = b->header_lists.len;
    var_mark(&b->keys, &m->keys);
    var_mark(&b->values, &m->values);
    var_mark(&b->header_keys, &m->header_keys);
    var_mark(&b->header_values, &m->header_values);
}

static void
builder_rollback(Builder *b, const Mark *m)
{
    b->rows = m->rows;
    b->offsets.len = m->offsets;
    b->timestamps.len = m->timestamps;
    b->types.len = m->types;
    b->attributes.len = m->attributes;
    b->ts_deltas.len = m->ts_deltas;
    b->header_lists.len = m->header_lists;
    var_rollback(&b->keys, &m->keys);
    var_rollback(&b->values, &m->values);
    var_rollback(&b->header_keys, &m->header_keys);
    var_rollback(&b->header_values, &m->header_values);
}

static void
builder_free(Builder *b)
{
    buf_free(&b->offsets);
    buf_free(&b->timestamps);
    buf_free(&b->types);
    buf_free(&b->attributes);
    buf_free(&b->ts_deltas);
    buf_free(&b->header_lists);
    var_free(&b->keys);
    var_free(&b->values);
    var_free(&b->header_keys);
    var_free(&b->header_values);
    b->rows = 0;
}

/* Empty columns (the offsets buffers hold their leading 0). */
static int
builder_start(Builder *b)
{
    if (var_init(&b->keys) < 0 || var_init(&b->values) < 0 || var_init(&b->header_keys) < 0 ||
        var_init(&b->header_values) < 0 || buf_reserve(&b->header_lists, 4) < 0)
        return -1;
    put_i32(&b->header_lists, 0);
    return 0;
}

/* Room for `rows` more rows in every fixed-width buffer. */
static int
builder_reserve(Builder *b, Py_ssize_t rows)
{
    if (buf_reserve(&b->offsets, rows * 8) < 0 || buf_reserve(&b->timestamps, rows * 8) < 0 ||
        buf_reserve(&b->types, rows * 4) < 0)
        return -1;
    if (b->want_details && (buf_reserve(&b->attributes, rows * 4) < 0 || buf_reserve(&b->ts_deltas, rows * 8) < 0))
        return -1;
    if (b->want_keys && var_reserve(&b->keys, rows) < 0)
        return -1;
    if (b->want_values && var_reserve(&b->values, rows) < 0)
        return -1;
    if (b->want_headers && buf_reserve(&b->header_lists, rows * 4) < 0)
        return -1;
    return 0;
}

static int
Builder_init(Builder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"keys", "values", "headers", "details", NULL};
    int keys = 1, values = 1, headers = 0, details = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pppp:RecordBuilder", kwlist, &keys, &values, &headers,
                                     &details))
        return -1;
    builder_free(self);
    self->want_keys = keys;
    self->want_values = values;
    self->want_headers = headers;
    self->want_details = details;
    return builder_start(self);
}

/* A subclass whose __init__ skipped ours has no columns to write into. */
static int
builder_ready(Builder *self)
{
    if (self->keys.offsets.p != NULL)
        return 1;
    PyErr_SetString(PyExc_RuntimeError, "RecordBuilder.__init__ was not called");
    return 0;
}

static void
Builder_dealloc(Builder *self)
{
    builder_free(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ---- varints ---- */

enum { VARINT_OK = 0, VARINT_PAST_END, VARINT_TOO_LONG, VARINT_TOO_BIG };

/* Kafka's unsigned LEB128 of at most `max_bytes` bytes (5: int32, 10: int64) whose value must fit
 * 32 or 64 bits; reads never go at or past `end`. */
static inline int
read_uvarint(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos, int max_bytes, uint64_t *out)
{
    Py_ssize_t i = *pos;
    if (i >= end)
        return VARINT_PAST_END;
    uint8_t byte = p[i];
    if (byte < 0x80) {
        *out = byte;
        *pos = i + 1;
        return VARINT_OK;
    }
    uint64_t u = byte & 0x7F;
    for (int n = 1; n < max_bytes; n++) {
        if (++i >= end)
            return VARINT_PAST_END;
        byte = p[i];
        if (n == max_bytes - 1) {
            if (byte >= 0x80)
                return VARINT_TOO_LONG;
            /* the last byte holds bits 28.. (int32) or 63.. (int64): nothing above bit 31 or 63 */
            if ((max_bytes == 5 && byte > 0x0F) || (max_bytes == 10 && byte > 0x01))
                return VARINT_TOO_BIG;
        }
        u |= (uint64_t)(byte & 0x7F) << (7 * n);
        if (byte < 0x80) {
            *out = u;
            *pos = i + 1;
            return VARINT_OK;
        }
    }
    return VARINT_TOO_LONG; /* not reached: the last byte returned above */
}

static inline int64_t
zigzag(uint64_t u)
{
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

static const char *const varint_problem[] = {
    "", "a varint runs past the end of the records", "a varint is longer than Kafka allows",
    "a varint does not fit its field"};

/* ---- the walk ---- */

typedef struct {
    int64_t lo, hi; /* offsets kept: lo <= offset <= hi */
    int has_ts_lo, has_ts_hi;
    int64_t ts_lo, ts_hi; /* timestamps kept: ts_lo <= ts < ts_hi */
} Bounds;

static int
as_int64(PyObject *o, int64_t *out, const char *what)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "%s does not fit in 64 bits", what);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

static int
parse_bounds(PyObject *t, Bounds *b)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4) {
        PyErr_SetString(PyExc_TypeError, "bounds must be a tuple (first offset, last offset, min ts, end ts)");
        return -1;
    }
    if (as_int64(PyTuple_GET_ITEM(t, 0), &b->lo, "first offset") < 0 ||
        as_int64(PyTuple_GET_ITEM(t, 1), &b->hi, "last offset") < 0)
        return -1;
    PyObject *lo = PyTuple_GET_ITEM(t, 2), *hi = PyTuple_GET_ITEM(t, 3);
    b->has_ts_lo = lo != Py_None;
    b->has_ts_hi = hi != Py_None;
    b->ts_lo = b->ts_hi = 0;
    if (b->has_ts_lo && as_int64(lo, &b->ts_lo, "min timestamp") < 0)
        return -1;
    if (b->has_ts_hi && as_int64(hi, &b->ts_hi, "end timestamp") < 0)
        return -1;
    return 0;
}

static int
is_utf8(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n && s[i] < 0x80)
        i++;
    if (i == n)
        return 1;
    /* not plain ASCII: Python's own strict decoder decides, so the answer is the Python walk's */
    PyObject *u = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
    if (u == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(u);
    return 1;
}

typedef struct {
    Py_ssize_t record; /* index of the record being read */
    const char *why;
} Damage;

/* 1 = ok, 0 = damaged (`damage` says why), -1 = a Python error is set (memory, or a column too big). */
static int
walk(Builder *b, const uint8_t *p, Py_ssize_t end, int64_t count, int64_t base_offset, int64_t base_ts,
     int log_append, int64_t max_ts, const Bounds *bounds, Damage *damage)
{
    const int32_t ts_type = log_append ? 1 : 0;
    const int keys = b->want_keys, values = b->want_values, headers = b->want_headers, details = b->want_details;
    /* header counts and lengths: int64 varints, or Kafka's own int32 ones with details (the rows of a table) */
    const int header_varint = details ? 5 : 10;
    Py_ssize_t pos = 0;
    uint64_t u;
    int rc;

    /* A kept record takes at least 6 bytes (length, attributes, timestamp, offset, key and value lengths). */
    Py_ssize_t room = end / 6 + 1;
    if (builder_reserve(b, count < room ? (Py_ssize_t)count : room) < 0)
        return -1;

#define VARINT(max_bytes, dest)                                                                                 \
    do {                                                                                                       \
        if (pos < end && p[pos] < 0x80) {                                                                      \
            u = p[pos++];                                                                                      \
        } else if ((rc = read_uvarint(p, end, &pos, (max_bytes), &u)) != VARINT_OK) {                          \
            damage->why = varint_problem[rc];                                                                  \
            return 0;                                                                                          \
        }                                                                                                      \
        (dest) = zigzag(u);                                                                                    \
    } while (0)
#define DAMAGED(text)                                                                                           \
    do {                                                                                                       \
        damage->why = (text);                                                                                  \
        return 0;                                                                                              \
    } while (0)

    for (int64_t k = 0; k < count; k++) {
        int64_t length, ts_delta, offset_delta, key_len, value_len;
        damage->record = (Py_ssize_t)k;
        VARINT(5, length);
        if (length <= 0 || length > end - pos)
            DAMAGED("a record's length runs past the records");
        const Py_ssize_t record_end = pos + (Py_ssize_t)length;
        const int32_t attributes = p[pos++]; /* one byte, any value; inside the record (length > 0) */
        VARINT(10, ts_delta);
        VARINT(5, offset_delta);

        /* base_offset is >= 0 (checked with the batch header) and the delta an int32: only the top can
         * overflow, and an offset above int64 is past every last offset */
        int offset_over = offset_delta > 0 && base_offset > INT64_MAX - offset_delta;
        int64_t offset = offset_over ? INT64_MAX : base_offset + offset_delta;
        int ts_over = 0;
        int64_t ts;
        if (log_append)
            ts = max_ts;
        else if (ts_delta > 0 && base_ts > INT64_MAX - ts_delta)
            ts_over = 1, ts = INT64_MAX;
        else if (ts_delta < 0 && base_ts < INT64_MIN - ts_delta)
            ts_over = -1, ts = INT64_MIN;
        else
            ts = base_ts + ts_delta;
        int keep = !offset_over && offset >= bounds->lo && offset <= bounds->hi;
        if (keep && bounds->has_ts_lo)
            keep = ts_over > 0 || (ts_over == 0 && ts >= bounds->ts_lo);
        if (keep && bounds->has_ts_hi)
            keep = ts_over < 0 || (ts_over == 0 && ts < bounds->ts_hi);
        if (!keep) {
            pos = record_end;
            continue;
        }

        VARINT(5, key_len);
        const uint8_t *key = NULL;
        if (key_len >= 0) {
            if (key_len > record_end - pos)
                DAMAGED("a key runs past its record");
            key = p + pos;
            pos += (Py_ssize_t)key_len;
        }
        VARINT(5, value_len);
        const uint8_t *value = NULL;
        if (value_len >= 0) {
            if (value_len > record_end - pos)
                DAMAGED("a value runs past its record");
            value = p + pos;
            pos += (Py_ssize_t)value_len;
        }
        if (pos > record_end)
            DAMAGED("a key and value run past their record");
        if (ts_over)
            DAMAGED("a timestamp does not fit in 64 bits");

        if (headers) {
            int64_t n_headers, name_len, header_len;
            VARINT(header_varint, n_headers);
            if (n_headers < 0)
                DAMAGED("a negative header count");
            /* every header takes two bytes at least, and none may end past the record */
            for (int64_t h = 0; h < n_headers; h++) {
                VARINT(header_varint, name_len);
                if (name_len < 0)
                    DAMAGED("a null header key");
                if (name_len > record_end - pos)
                    DAMAGED("a header key runs past its record");
                if (!is_utf8(p + pos, (Py_ssize_t)name_len))
                    DAMAGED("a header key is not UTF-8");
                if (var_reserve(&b->header_keys, 1) < 0 ||
                    var_append(&b->header_keys, p + pos, (Py_ssize_t)name_len, 0, "header keys") < 0)
                    return -1;
                pos += (Py_ssize_t)name_len;
                VARINT(header_varint, header_len);
                const uint8_t *header_value = NULL;
                if (header_len >= 0) {
                    if (header_len > record_end - pos)
                        DAMAGED("a header value runs past its record");
                    header_value = p + pos;
                    pos += (Py_ssize_t)header_len;
                }
                if (var_reserve(&b->header_values, 1) < 0 ||
                    var_append(&b->header_values, header_value, (Py_ssize_t)header_len, 1, "header values") < 0)
                    return -1;
            }
            if (pos != record_end)
                DAMAGED("a record's headers do not end where its length says");
            if (b->header_keys.items > ARROW_INT32_MAX)
                return too_big("headers");
            put_i32(&b->header_lists, (int32_t)b->header_keys.items);
        }
        pos = record_end;

        put_i64(&b->offsets, offset);
        put_i64(&b->timestamps, ts);
        put_i32(&b->types, ts_type);
        if (details) {
            put_i32(&b->attributes, attributes);
            put_i64(&b->ts_deltas, ts_delta);
        }
        if (keys && var_append(&b->keys, key, (Py_ssize_t)key_len, 1, "keys") < 0)
            return -1;
        if (values && var_append(&b->values, value, (Py_ssize_t)value_len, 1, "values") < 0)
            return -1;
        b->rows++;
    }
#undef VARINT
#undef DAMAGED
    if (pos != end) {
        damage->record = (Py_ssize_t)count;
        damage->why = "bytes are left after the last record";
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(walk_doc,
             "walk(records, count, base_offset, base_timestamp, log_append_time, bounds) -> rows appended\n\n"
             "Append the kept records of one v2 batch. ``records`` is the decompressed records section (any "
             "buffer), ``count`` the batch's record count, ``log_append_time`` the batch's max timestamp for a "
             "LOG_APPEND_TIME batch (every row gets it), else None; ``bounds`` is (first offset, last offset, min "
             "timestamp or None, end timestamp or None), all within int64. Damaged records raise ValueError and "
             "leave the builder as it was.");

static PyObject *
Builder_walk(Builder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!builder_ready(self))
        return NULL;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "walk() takes 6 arguments");
        return NULL;
    }
    int64_t count, base_offset, base_ts, max_ts = 0;
    Bounds bounds;
    if (as_int64(args[1], &count, "record count") < 0 || as_int64(args[2], &base_offset, "base offset") < 0 ||
        as_int64(args[3], &base_ts, "base timestamp") < 0)
        return NULL;
    int log_append = args[4] != Py_None;
    if (log_append && as_int64(args[4], &max_ts, "log append time") < 0)
        return NULL;
    if (parse_bounds(args[5], &bounds) < 0)
        return NULL;
    if (base_offset < 0) {
        PyErr_SetString(PyExc_ValueError, "negative base offset");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Mark mark;
    Damage damage = {0, NULL};
    builder_mark(self, &mark);
    int ok = walk(self, (const uint8_t *)view.buf, view.len, count < 0 ? 0 : count, base_offset, base_ts,
                  log_append, max_ts, &bounds, &damage);
    PyBuffer_Release(&view);
    if (ok != 1) {
        builder_rollback(self, &mark);
        if (ok == 0)
            PyErr_Format(PyExc_ValueError, "record %zd of %lld: %s", damage.record, (long long)count, damage.why);
        return NULL;
    }
    return PyLong_FromSsize_t(self->rows - mark.rows);
}

static int
append_field(VarColumn *c, PyObject *o, const char *what)
{
    if (o == Py_None)
        return var_append(c, NULL, 0, 1, what);
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_SIMPLE) < 0)
        return -1;
    int rc = var_append(c, (const uint8_t *)view.buf, view.len, 1, what);
    PyBuffer_Release(&view);
    return rc;
}

PyDoc_STRVAR(append_doc,
             "append(offset, timestamp, timestamp_type, key, value)\n\n"
             "Append one row decoded elsewhere (a legacy magic 0/1 message): no headers; key and value are bytes "
             "or None.");

static PyObject *
Builder_append(Builder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!builder_ready(self))
        return NULL;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "append() takes 5 arguments");
        return NULL;
    }
    int64_t offset, ts, ts_type;
    if (as_int64(args[0], &offset, "offset") < 0 || as_int64(args[1], &ts, "timestamp") < 0 ||
        as_int64(args[2], &ts_type, "timestamp type") < 0)
        return NULL;
    Mark mark;
    builder_mark(self, &mark);
    if (builder_reserve(self, 1) < 0)
        return NULL;
    if ((self->want_keys && append_field(&self->keys, args[3], "keys") < 0) ||
        (self->want_values && append_field(&self->values, args[4], "values") < 0)) {
        builder_rollback(self, &mark);
        return NULL;
    }
    put_i64(&self->offsets, offset);
    put_i64(&self->timestamps, ts);
    put_i32(&self->types, (int32_t)ts_type);
    if (self->want_details) {
        put_i32(&self->attributes, 0);
        put_i64(&self->ts_deltas, 0);
    }
    if (self->want_headers)
        put_i32(&self->header_lists, last_i32(&self->header_lists));
    self->rows++;
    Py_RETURN_NONE;
}

/* (validity or None, offsets, data, null count) of a variable-width column */
static PyObject *
var_export(VarColumn *c, int nullable, int copy)
{
    PyObject *valid, *offsets, *data;
    if (nullable && c->nulls > 0)
        valid = copy ? buf_copy(&c->valid) : buf_release(&c->valid);
    else
        valid = Py_NewRef(Py_None);
    offsets = copy ? buf_copy(&c->offsets) : buf_release(&c->offsets);
    data = copy ? buf_copy(&c->data) : buf_release(&c->data);
    PyObject *out = NULL;
    if (valid && offsets && data)
        out = Py_BuildValue("(OOOn)", valid, offsets, data, nullable ? c->nulls : (Py_ssize_t)0);
    Py_XDECREF(valid);
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    return out;
}

static PyObject *
builder_export(Builder *self, int copy)
{
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    PyObject *rows = PyLong_FromSsize_t(self->rows);
    PyObject *offsets = copy ? buf_copy(&self->offsets) : buf_release(&self->offsets);
    PyObject *timestamps = copy ? buf_copy(&self->timestamps) : buf_release(&self->timestamps);
    PyObject *types = copy ? buf_copy(&self->types) : buf_release(&self->types);
    PyObject *attributes = Py_NewRef(Py_None), *ts_deltas = Py_NewRef(Py_None);
    if (self->want_details) {
        Py_SETREF(attributes, copy ? buf_copy(&self->attributes) : buf_release(&self->attributes));
        Py_SETREF(ts_deltas, copy ? buf_copy(&self->ts_deltas) : buf_release(&self->ts_deltas));
    }
    PyObject *keys = self->want_keys ? var_export(&self->keys, 1, copy) : Py_NewRef(Py_None);
    PyObject *values = self->want_values ? var_export(&self->values, 1, copy) : Py_NewRef(Py_None);
    PyObject *headers = Py_NewRef(Py_None);
    if (self->want_headers) {
        PyObject *lists = copy ? buf_copy(&self->header_lists) : buf_release(&self->header_lists);
        PyObject *names = var_export(&self->header_keys, 0, copy);
        PyObject *hvalues = var_export(&self->header_values, 1, copy);
        Py_DECREF(headers);
        headers = (lists && names && hvalues) ? Py_BuildValue("(OOOn)", lists, names, hvalues,
                                                              self->header_keys.items)
                                              : NULL;
        Py_XDECREF(lists);
        Py_XDECREF(names);
        Py_XDECREF(hvalues);
    }
    int failed = !(rows && offsets && timestamps && types && attributes && ts_deltas && keys && values && headers) ||
                 PyDict_SetItemString(out, "rows", rows) < 0 || PyDict_SetItemString(out, "offset", offsets) < 0 ||
                 PyDict_SetItemString(out, "timestamp", timestamps) < 0 ||
                 PyDict_SetItemString(out, "timestampType", types) < 0 ||
                 PyDict_SetItemString(out, "attributes", attributes) < 0 ||
                 PyDict_SetItemString(out, "timestampDelta", ts_deltas) < 0 ||
                 PyDict_SetItemString(out, "key", keys) < 0 || PyDict_SetItemString(out, "value", values) < 0 ||
                 PyDict_SetItemString(out, "headers", headers) < 0;
    Py_XDECREF(rows);
    Py_XDECREF(offsets);
    Py_XDECREF(timestamps);
    Py_XDECREF(types);
    Py_XDECREF(attributes);
    Py_XDECREF(ts_deltas);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    Py_XDECREF(headers);
    if (failed) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

PyDoc_STRVAR(take_doc,
             "take() -> dict\n\n"
             "Hand the columns over and start empty ones. Keys: rows; offset and timestamp (int64, ms), "
             "timestampType (int32): Memory; attributes (int32) and timestampDelta (int64): Memory with details, "
             "else None; key and value: (validity or None, int32 offsets, data, null count) "
             "or None when not built; headers: (int32 list offsets, header keys as (None, offsets, data, 0), "
             "header values as (validity or None, offsets, data, null count), number of headers) or None.");

static PyObject *
Builder_take(Builder *self, PyObject *Py_UNUSED(ignored))
{
    if (!builder_ready(self))
        return NULL;
    PyObject *out = builder_export(self, 0);
    builder_free(self);
    if (builder_start(self) < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

PyDoc_STRVAR(copy_doc, "copy() -> dict\n\nThe columns as take() gives them, as bytes copies; the builder keeps them.");

static PyObject *
Builder_copy(Builder *self, PyObject *Py_UNUSED(ignored))
{
    return builder_ready(self) ? builder_export(self, 1) : NULL;
}

static Py_ssize_t
Builder_length(Builder *self)
{
    return self->rows;
}

static PyObject *
Builder_get_nbytes(Builder *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->keys.data.len + self->values.data.len + self->header_keys.data.len +
                              self->header_values.data.len);
}

static PyObject *
Builder_get_flag(Builder *self, void *closure)
{
    int which = (int)(intptr_t)closure;
    return PyBool_FromLong(which == 0   ? self->want_keys
                           : which == 1 ? self->want_values
                           : which == 2 ? self->want_headers
                                        : self->want_details);
}

static PyMethodDef Builder_methods[] = {
    {"walk", (PyCFunction)(void (*)(void))Builder_walk, METH_FASTCALL, walk_doc},
    {"append", (PyCFunction)(void (*)(void))Builder_append, METH_FASTCALL, append_doc},
    {"take", (PyCFunction)Builder_take, METH_NOARGS, take_doc},
    {"copy", (PyCFunction)Builder_copy, METH_NOARGS, copy_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Builder_getset[] = {
    {"nbytes", (getter)Builder_get_nbytes, NULL, "Bytes of keys, values and headers held.", NULL},
    {"keys", (getter)Builder_get_flag, NULL, "Whether keys are built.", (void *)0},
    {"values", (getter)Builder_get_flag, NULL, "Whether values are built.", (void *)1},
    {"headers", (getter)Builder_get_flag, NULL, "Whether headers are built.", (void *)2},
    {"details", (getter)Builder_get_flag, NULL, "Whether record attributes and timestamp deltas are built.", (void *)3},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Builder_as_sequence = {.sq_length = (lenfunc)Builder_length};

static PyTypeObject BuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rsm.kafka._recordwalk.RecordBuilder",
    .tp_doc = "RecordBuilder(keys=True, values=True, headers=False, details=False): rows of v2 batches as Arrow column "
               "buffers; details adds record attributes and timestamp deltas and reads header counts and lengths "
               "as Kafka's int32 varints.",
    .tp_basicsize = sizeof(Builder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Builder_init,
    .tp_dealloc = (destructor)Builder_dealloc,
    .tp_methods = Builder_methods,
    .tp_getset = Builder_getset,
    .tp_as_sequence = &Builder_as_sequence,
};

static struct PyModuleDef recordwalk_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rsm.kafka._recordwalk",
    .m_doc = "Kafka v2 records walked into Arrow column buffers (see rsm.kafka.columnar).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__recordwalk(void)
{
    if (PyType_Ready(&MemoryType) < 0 || PyType_Ready(&BuilderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&recordwalk_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Memory", (PyObject *)&MemoryType) < 0 ||
        PyModule_AddObjectRef(m, "RecordBuilder", (PyObject *)&BuilderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
