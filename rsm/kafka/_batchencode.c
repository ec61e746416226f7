/* The records section of a Kafka v2 batch, encoded from columns (rsm.kafka.batch_encoder.encode_records).
 *
 * encode_records(attributes, timestamp_deltas, offset_deltas, keys, values, headers) -> bytes
 *
 * Each argument is a sequence with one item per record: the attributes byte, the timestamp delta (int64), the
 * offset delta (int32), the key and the value (bytes or None), and the headers (None or a sequence of
 * (name, value) pairs, or of {"key": name, "value": value} dicts as pyarrow's to_pylist gives them; name a str,
 * value bytes or None). The result is what rsm.kafka.batch_encoder.encode_record gives for each record, joined.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
} Out;

static int
out_reserve(Out *o, Py_ssize_t extra)
{
    if (o->len + extra <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 65536;
    while (cap < o->len + extra)
        cap *= 2;
    char *b = PyMem_Realloc(o->buf, (size_t)cap);
    if (b == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->buf = b;
    o->cap = cap;
    return 0;
}

static inline uint64_t
zigzag(int64_t n)
{
    return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
}

static inline Py_ssize_t
uvarint_len(uint64_t u)
{
    Py_ssize_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline void
put_uvarint(Out *o, uint64_t u)
{
    unsigned char *p = (unsigned char *)o->buf + o->len;
    while (u >= 0x80) {
        *p++ = (unsigned char)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *p++ = (unsigned char)u;
    o->len = (char *)p - o->buf;
}

/* A bytes-or-None field: data and length, length -1 for None. */
static int
bytes_field(PyObject *obj, const char *what, Py_ssize_t i, const char **data, Py_ssize_t *len)
{
    if (obj == Py_None) {
        *data = NULL;
        *len = -1;
        return 0;
    }
    if (!PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "record %zd: %s must be bytes or None, not %.80s", i, what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *data = PyBytes_AS_STRING(obj);
    *len = PyBytes_GET_SIZE(obj);
    if (*len > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "record %zd: %s of %zd bytes is too long for a record", i, what, *len);
        return -1;
    }
    return 0;
}

static inline Py_ssize_t
field_size(Py_ssize_t len)
{
    return uvarint_len(zigzag(len)) + (len > 0 ? len : 0);
}

static inline void
put_field(Out *o, const char *data, Py_ssize_t len)
{
    put_uvarint(o, zigzag(len));
    if (len > 0) {
        memcpy(o->buf + o->len, data, (size_t)len);
        o->len += len;
    }
}

/* One header as (name, value): borrowed references. */
static int
header_pair(PyObject *h, Py_ssize_t i, PyObject **name, PyObject **value)
{
    if (PyDict_Check(h)) {
        *name = PyDict_GetItemString(h, "key");
        *value = PyDict_GetItemString(h, "value");
        if (*name == NULL || *value == NULL) {
            PyErr_Format(PyExc_TypeError, "record %zd: a header dict needs 'key' and 'value'", i);
            return -1;
        }
        return 0;
    }
    if (PyTuple_Check(h) && PyTuple_GET_SIZE(h) == 2) {
        *name = PyTuple_GET_ITEM(h, 0);
        *value = PyTuple_GET_ITEM(h, 1);
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "record %zd: a header must be a (name, value) tuple or a dict, not %.80s", i,
                 Py_TYPE(h)->tp_name);
    return -1;
}

static int
encode_one(Out *o, Py_ssize_t i, PyObject *attr_o, PyObject *ts_o, PyObject *off_o, PyObject *key_o,
           PyObject *value_o, PyObject *headers_o)
{
    long attributes = PyLong_AsLong(attr_o);
    if (attributes == -1 && PyErr_Occurred())
        return -1;
    long long ts = PyLong_AsLongLong(ts_o);
    if (ts == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "record %zd: varlong out of int64 range", i);
        }
        return -1;
    }
    long long off = PyLong_AsLongLong(off_o);
    if ((off == -1 && PyErr_Occurred()) || off < INT32_MIN || off > INT32_MAX) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "record %zd: varint out of int32 range (offset delta)", i);
        return -1;
    }
    const char *key, *value;
    Py_ssize_t key_len, value_len;
    if (bytes_field(key_o, "the key", i, &key, &key_len) < 0 ||
        bytes_field(value_o, "the value", i, &value, &value_len) < 0)
        return -1;

    PyObject *headers = NULL;
    Py_ssize_t n_headers = 0;
    if (headers_o != Py_None) {
        headers = PySequence_Fast(headers_o, "headers must be a sequence");
        if (headers == NULL)
            return -1;
        n_headers = PySequence_Fast_GET_SIZE(headers);
    }
    /* first pass: the body's size, which its length prefix needs */
    Py_ssize_t body = 1 + uvarint_len(zigzag(ts)) + uvarint_len(zigzag(off)) + field_size(key_len) +
                      field_size(value_len) + uvarint_len(zigzag(n_headers));
    for (Py_ssize_t h = 0; h < n_headers; h++) {
        PyObject *name, *hv;
        if (header_pair(PySequence_Fast_GET_ITEM(headers, h), i, &name, &hv) < 0)
            goto fail;
        if (!PyUnicode_Check(name)) {
            PyErr_Format(PyExc_TypeError, "record %zd: a header name must be str", i);
            goto fail;
        }
        Py_ssize_t name_len;
        if (PyUnicode_AsUTF8AndSize(name, &name_len) == NULL)
            goto fail;
        const char *d;
        Py_ssize_t hv_len;
        if (bytes_field(hv, "a header value", i, &d, &hv_len) < 0)
            goto fail;
        body += field_size(name_len) + field_size(hv_len);
    }
    if (body > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "record %zd is too large (%zd bytes)", i, body);
        goto fail;
    }
    if (out_reserve(o, uvarint_len(zigzag(body)) + body) < 0)
        goto fail;
    /* second pass: the bytes */
    put_uvarint(o, zigzag(body));
    o->buf[o->len++] = (char)(attributes & 0xFF);
    put_uvarint(o, zigzag(ts));
    put_uvarint(o, zigzag(off));
    put_field(o, key, key_len);
    put_field(o, value, value_len);
    put_uvarint(o, zigzag(n_headers));
    for (Py_ssize_t h = 0; h < n_headers; h++) {
        PyObject *name, *hv;
        header_pair(PySequence_Fast_GET_ITEM(headers, h), i, &name, &hv);
        Py_ssize_t name_len = 0, hv_len = -1;
        const char *name_utf8 = PyUnicode_AsUTF8AndSize(name, &name_len); /* checked in the first pass */
        const char *d = NULL;
        bytes_field(hv, "a header value", i, &d, &hv_len);
        put_field(o, name_utf8, name_len);
        put_field(o, d, hv_len);
    }
    Py_XDECREF(headers);
    return 0;
fail:
    Py_XDECREF(headers);
    return -1;
}

static PyObject *
encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_records(attributes, timestamp_deltas, offset_deltas, keys, values, headers)");
        return NULL;
    }
    PyObject *cols[6] = {NULL};
    PyObject *result = NULL;
    Out o = {NULL, 0, 0};
    Py_ssize_t n = -1;
    for (int c = 0; c < 6; c++) {
        cols[c] = PySequence_Fast(args[c], "encode_records takes sequences");
        if (cols[c] == NULL)
            goto done;
        Py_ssize_t len = PySequence_Fast_GET_SIZE(cols[c]);
        if (n >= 0 && len != n) {
            PyErr_Format(PyExc_ValueError, "encode_records: column %d has %zd items, column 0 has %zd", c, len, n);
            goto done;
        }
        n = len;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (encode_one(&o, i, PySequence_Fast_GET_ITEM(cols[0], i), PySequence_Fast_GET_ITEM(cols[1], i),
                       PySequence_Fast_GET_ITEM(cols[2], i), PySequence_Fast_GET_ITEM(cols[3], i),
                       PySequence_Fast_GET_ITEM(cols[4], i), PySequence_Fast_GET_ITEM(cols[5], i)) < 0)
            goto done;
    }
    result = PyBytes_FromStringAndSize(o.buf ? o.buf : "", o.len);
done:
    for (int c = 0; c < 6; c++)
        Py_XDECREF(cols[c]);
    PyMem_Free(o.buf);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     "encode_records(attributes, timestamp_deltas, offset_deltas, keys, values, headers) -> bytes\n\n"
     "The records of a v2 batch, uncompressed, from one sequence per field."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_batchencode", "Kafka v2 records encoded from columns.", -1, methods,
};

PyMODINIT_FUNC
PyInit__batchencode(void)
{
    return PyModule_Create(&module);
}
