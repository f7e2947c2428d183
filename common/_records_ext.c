/* The per-record loops of Kafka record batches in C: raftka.common._records_ext.

common/records.py stays the reference and the fallback. Every function here answers either
"OK, here is the result" or "not OK" (False or None) and never builds an error message: on
"not OK" the caller runs the pure-Python function, which raises the exact error it always
raised (murmur2, the producer's key hash, has no "not OK": every byte string has a hash). The
bytes come from any client, so every read is checked against the end of the buffer
(or of the record) before it happens.

Varints follow records.py decode_varint exactly: zigzag, at most 5 bytes for a varint and 10
for a varlong, no overflow check (a 5-byte varint may carry 35 bits; a 10-byte varlong 70,
which the slow path below turns into a Python int as Python would). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* records.py's limits (exported, and compared by tests/test_records_ext.py) */
#define RECORD_BYTES_MIN 7
#define HEADERS_PER_RECORD_MAX 4096
#define VARINT_BYTES_MAX 5
#define VARLONG_BYTES_MAX 10

/* Read the zigzag-encoded varint at *pos, no byte at or past limit. z's bits from 64 on (only a
   10-byte varlong has them) go to *z_high. */
static inline int
read_zigzag(const uint8_t *p, Py_ssize_t limit, Py_ssize_t *pos, int max_bytes,
            uint64_t *z_out, unsigned *z_high)
{
    Py_ssize_t i = *pos;
    uint64_t z = 0;
    for (int k = 0; k < max_bytes && i < limit; k++) {
        unsigned b = p[i++];
        unsigned payload = b & 0x7F;
        unsigned high = 0;
        if (k == 9) {               /* bit 63 and 6 bits past it */
            z |= (uint64_t)(payload & 1) << 63;
            high = payload >> 1;
        } else {
            z |= (uint64_t)payload << (7 * k);
        }
        if (b < 0x80) {
            *pos = i;
            *z_out = z;
            *z_high = high;
            return 1;
        }
    }
    return 0;
}

static inline int64_t
unzigzag(uint64_t z)
{
    return (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
}

/* A varint (at most 5 bytes: the value always fits an int64). */
static inline int
read_varint(const uint8_t *p, Py_ssize_t limit, Py_ssize_t *pos, int64_t *out)
{
    Py_ssize_t i = *pos;
    uint64_t z;
    unsigned high;
    if (i < limit && p[i] < 0x80) {     /* nearly every varint of a record: 1 or 2 bytes */
        *out = unzigzag(p[i]);
        *pos = i + 1;
        return 1;
    }
    if (i + 1 < limit && p[i + 1] < 0x80) {
        *out = unzigzag((uint64_t)(p[i] & 0x7F) | (uint64_t)p[i + 1] << 7);
        *pos = i + 2;
        return 1;
    }
    if (!read_zigzag(p, limit, pos, VARINT_BYTES_MAX, &z, &high))
        return 0;
    *out = unzigzag(z);
    return 1;
}

static inline int
add_int64(int64_t a, int64_t b, int64_t *out)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return 0;
    *out = a + b;
    return 1;
}

/* base + delta as a Python int, beyond int64 too (as Python adds them). */
static PyObject *
add_exact(int64_t base, int64_t delta)
{
    int64_t sum;
    if (add_int64(base, delta, &sum))
        return PyLong_FromLongLong(sum);
    PyObject *a = PyLong_FromLongLong(base);
    PyObject *b = a ? PyLong_FromLongLong(delta) : NULL;
    PyObject *out = b ? PyNumber_Add(a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return out;
}

/* base + the zigzag value of z = z_high * 2**64 + z_low (a varlong wider than 64 bits):
   m = z >> 1, the value m when z is even, ~m when it is odd. */
static PyObject *
add_wide_zigzag(int64_t base, uint64_t z_low, unsigned z_high)
{
    PyObject *high = NULL, *shift = NULL, *shifted = NULL, *low = NULL, *m = NULL,
             *value = NULL, *b = NULL, *out = NULL;
    if (!(high = PyLong_FromUnsignedLong(z_high)) || !(shift = PyLong_FromLong(63)) ||
        !(shifted = PyNumber_Lshift(high, shift)) ||
        !(low = PyLong_FromUnsignedLongLong(z_low >> 1)) || !(m = PyNumber_Or(shifted, low)))
        goto done;
    if (z_low & 1) {
        if (!(value = PyNumber_Invert(m)))
            goto done;
    } else {
        value = Py_NewRef(m);
    }
    if ((b = PyLong_FromLongLong(base)))
        out = PyNumber_Add(b, value);
done:
    Py_XDECREF(high);
    Py_XDECREF(shift);
    Py_XDECREF(shifted);
    Py_XDECREF(low);
    Py_XDECREF(m);
    Py_XDECREF(value);
    Py_XDECREF(b);
    return out;
}

/* One record's fields up to its headers, each checked to lie inside the record. */
typedef struct {
    Py_ssize_t headers_at;          /* the headers count */
    Py_ssize_t end;                 /* the position after the record */
    uint64_t ts_z;                  /* the timestamp delta, still zigzag-encoded */
    unsigned ts_z_high;
    int64_t offset_delta;
    Py_ssize_t key_at, key_length;  /* length -1: a null key */
    Py_ssize_t value_at, value_length;
} RawRecord;

/* 1: the record at pos parses up to its headers; 0: not OK.

   Reads stop at the record's declared end where records.py's loops read on to the end of the
   data: a field that runs past the record's end fails there as it fails here (its last check
   is that the fields end exactly where the record does, and positions only grow). */
static inline int
parse_record(const uint8_t *p, Py_ssize_t n, Py_ssize_t pos, RawRecord *r)
{
    Py_ssize_t i = pos;
    int64_t length, key_length, value_length;
    if (!read_varint(p, n, &i, &length) || length < RECORD_BYTES_MIN - 1 || length > n - i)
        return 0;
    Py_ssize_t end = i + (Py_ssize_t)length;
    i++;                            /* attributes: unused */
    r->ts_z_high = 0;
    if (i < end && p[i] < 0x80) {           /* the timestamp delta, inline as read_varint's */
        r->ts_z = p[i++];
    } else if (i + 1 < end && p[i + 1] < 0x80) {
        r->ts_z = (uint64_t)(p[i] & 0x7F) | (uint64_t)p[i + 1] << 7;
        i += 2;
    } else if (!read_zigzag(p, end, &i, VARLONG_BYTES_MAX, &r->ts_z, &r->ts_z_high)) {
        return 0;
    }
    if (!read_varint(p, end, &i, &r->offset_delta))
        return 0;
    if (!read_varint(p, end, &i, &key_length) || key_length < -1 || key_length > end - i)
        return 0;
    r->key_at = i;
    r->key_length = (Py_ssize_t)key_length;
    if (key_length > 0)
        i += (Py_ssize_t)key_length;
    if (!read_varint(p, end, &i, &value_length) || value_length < -1 || value_length > end - i)
        return 0;
    r->value_at = i;
    r->value_length = (Py_ssize_t)value_length;
    if (value_length > 0)
        i += (Py_ssize_t)value_length;
    if (i >= end)                   /* no room for the headers count */
        return 0;
    r->headers_at = i;
    r->end = end;
    return 1;
}

static inline int
is_ascii(const uint8_t *p, Py_ssize_t length)
{
    uint8_t any = 0;
    for (Py_ssize_t k = 0; k < length; k++)
        any |= p[k];
    return any < 0x80;
}

/* The headers from their count at i to the record's end: every length inside the record, each
   key UTF-8, the last header ending where the record does. With out, builds the list of (key,
   value) pairs in *out and adds their size as the fetcher counts it (key characters plus value
   bytes) to *size. 1 OK, 0 not OK, -1 a Python error (out of memory). */
static int
parse_headers(const uint8_t *p, Py_ssize_t i, Py_ssize_t end, PyObject **out, Py_ssize_t *size)
{
    int64_t count;
    PyObject *list = NULL;
    if (p[i] == 0) {                /* no headers: nearly every record */
        if (i + 1 != end)
            return 0;
        if (out && !(*out = PyList_New(0)))
            return -1;
        return 1;
    }
    if (!read_varint(p, end, &i, &count) || count < 0 || count > HEADERS_PER_RECORD_MAX ||
        count > (end - i) / 2)      /* each header takes 2 bytes at least */
        return 0;
    if (out && !(list = PyList_New((Py_ssize_t)count)))
        return -1;
    for (Py_ssize_t k = 0; k < (Py_ssize_t)count; k++) {
        int64_t name_length, value_length;
        if (!read_varint(p, end, &i, &name_length) || name_length < 0 || name_length > end - i)
            goto not_ok;
        PyObject *name = NULL;
        /* Only checking, an ASCII key needs no str: ASCII is UTF-8. */
        if (list || !is_ascii(p + i, (Py_ssize_t)name_length)) {
            name = PyUnicode_DecodeUTF8((const char *)p + i, (Py_ssize_t)name_length, NULL);
            if (!name) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    goto error;
                PyErr_Clear();
                goto not_ok;
            }
        }
        i += (Py_ssize_t)name_length;
        if (!read_varint(p, end, &i, &value_length) || value_length < -1 ||
            value_length > end - i) {
            Py_XDECREF(name);
            goto not_ok;
        }
        if (!list) {
            Py_XDECREF(name);
            if (value_length > 0)
                i += (Py_ssize_t)value_length;
            continue;
        }
        PyObject *value;
        if (value_length >= 0) {
            value = PyBytes_FromStringAndSize((const char *)p + i, (Py_ssize_t)value_length);
            if (!value) {
                Py_DECREF(name);
                goto error;
            }
            i += (Py_ssize_t)value_length;
            *size += (Py_ssize_t)value_length;
        } else {
            value = Py_NewRef(Py_None);
        }
        *size += PyUnicode_GET_LENGTH(name);
        PyObject *pair = PyTuple_New(2);
        if (!pair) {
            Py_DECREF(name);
            Py_DECREF(value);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, name);
        PyTuple_SET_ITEM(pair, 1, value);
        PyList_SET_ITEM(list, k, pair);
    }
    if (i != end)
        goto not_ok;
    if (out)
        *out = list;
    return 1;
not_ok:
    Py_XDECREF(list);
    return 0;
error:
    Py_XDECREF(list);
    return -1;
}

static PyObject *
bytes_or_none(const uint8_t *p, Py_ssize_t at, Py_ssize_t length)
{
    if (length < 0)
        return Py_NewRef(Py_None);
    return PyBytes_FromStringAndSize((const char *)p + at, length);
}

/* A tuple subclass without fields of its own (a NamedTuple), instances built as tuple.__new__
   builds them. */
static int
check_tuple_class(PyObject *cls)
{
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type) ||
        ((PyTypeObject *)cls)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "record_cls must be a NamedTuple class");
        return 0;
    }
    return 1;
}

static inline PyObject *
new_tuple_of(PyObject *cls, Py_ssize_t size)
{
    PyTypeObject *type = (PyTypeObject *)cls;
    return type->tp_alloc(type, size);
}

/* The fields every decoded record has: (offset, timestamp, key, value, headers), each a new
   reference; *header_size as the fetcher counts it. 1 OK, 0 not OK, -1 a Python error. */
typedef struct {
    PyObject *offset, *timestamp, *key, *value, *headers;
} Fields;

static void
clear_fields(Fields *f)
{
    Py_CLEAR(f->offset);
    Py_CLEAR(f->timestamp);
    Py_CLEAR(f->key);
    Py_CLEAR(f->value);
    Py_CLEAR(f->headers);
}

static int
decode_one(const uint8_t *p, Py_ssize_t n, Py_ssize_t *pos, int64_t base_offset, int64_t base_ts,
           PyObject *log_append_time, Fields *f, Py_ssize_t *header_size)
{
    RawRecord r;
    int ok;
    memset(f, 0, sizeof(*f));
    if (!parse_record(p, n, *pos, &r))
        return 0;
    *header_size = 0;
    ok = parse_headers(p, r.headers_at, r.end, &f->headers, header_size);
    if (ok <= 0)
        return ok;
    if (log_append_time != Py_None)
        f->timestamp = Py_NewRef(log_append_time);
    else if (r.ts_z_high == 0)
        f->timestamp = add_exact(base_ts, unzigzag(r.ts_z));
    else
        f->timestamp = add_wide_zigzag(base_ts, r.ts_z, r.ts_z_high);
    if (!f->timestamp || !(f->offset = add_exact(base_offset, r.offset_delta)) ||
        !(f->key = bytes_or_none(p, r.key_at, r.key_length)) ||
        !(f->value = bytes_or_none(p, r.value_at, r.value_length))) {
        clear_fields(f);
        return -1;
    }
    *pos = r.end;
    return 1;
}

PyDoc_STRVAR(walk_records_doc,
"walk_records(data, count, require_keys=False) -> bool\n\n"
"True iff records.py _walk_records(data, count, require_keys) would not raise: every record of the\n"
"uncompressed records section well formed, offset deltas 0, 1, 2, ..., count records, and\n"
"with require_keys none with a null key.");

static PyObject *
walk_records(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    int require_keys = 0;
    if (!PyArg_ParseTuple(args, "y*n|p:walk_records", &view, &count, &require_keys))
        return NULL;
    const uint8_t *p = view.buf;
    Py_ssize_t n = view.len, i = 0, index = 0;
    int ok = 1;
    while (i < n) {
        RawRecord r;
        Py_ssize_t unused = 0;
        if (index >= count || !parse_record(p, n, i, &r) || r.offset_delta != index
                || (require_keys && r.key_length < 0)) {
            ok = 0;
            break;
        }
        ok = parse_headers(p, r.headers_at, r.end, NULL, &unused);
        if (ok <= 0)
            break;
        i = r.end;
        index++;
    }
    PyBuffer_Release(&view);
    if (ok < 0)
        return NULL;
    return PyBool_FromLong(ok && index == count);
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(record_cls, data, base_offset, base_ts, log_append_time=None) -> list | None\n\n"
"The records of an uncompressed records section as records.py _decode_records returns them\n"
"(record_cls instances: offset, timestamp, key, value, headers), every timestamp\n"
"log_append_time when it is not None; None when the section is not well formed.");

static PyObject *
decode_records(PyObject *module, PyObject *args)
{
    PyObject *cls, *log_append_time = Py_None;
    Py_buffer view;
    long long base_offset, base_ts;
    if (!PyArg_ParseTuple(args, "Oy*LL|O:decode_records", &cls, &view, &base_offset, &base_ts,
                          &log_append_time))
        return NULL;
    PyObject *out = NULL;
    if (!check_tuple_class(cls) || !(out = PyList_New(0)))
        goto error;
    const uint8_t *p = view.buf;
    Py_ssize_t n = view.len, i = 0;
    while (i < n) {
        Fields f;
        Py_ssize_t header_size;
        int ok = decode_one(p, n, &i, base_offset, base_ts, log_append_time, &f, &header_size);
        if (ok == 0) {
            Py_DECREF(out);
            PyBuffer_Release(&view);
            Py_RETURN_NONE;
        }
        if (ok < 0)
            goto error;
        PyObject *record = new_tuple_of(cls, 5);
        if (!record) {
            clear_fields(&f);
            goto error;
        }
        PyTuple_SET_ITEM(record, 0, f.offset);
        PyTuple_SET_ITEM(record, 1, f.timestamp);
        PyTuple_SET_ITEM(record, 2, f.key);
        PyTuple_SET_ITEM(record, 3, f.value);
        PyTuple_SET_ITEM(record, 4, f.headers);
        int appended = PyList_Append(out, record);
        Py_DECREF(record);
        if (appended < 0)
            goto error;
    }
    PyBuffer_Release(&view);
    return out;
error:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* Positions of the ConsumerRecord fields (client/structs.py; the fetcher asserts the order). */
enum {
    CR_TOPIC, CR_PARTITION, CR_OFFSET, CR_TIMESTAMP, CR_TIMESTAMP_TYPE, CR_KEY, CR_VALUE,
    CR_HEADERS, CR_CHECKSUM, CR_KEY_SIZE, CR_VALUE_SIZE, CR_HEADER_SIZE, CR_LEADER_EPOCH,
    CR_FIELDS
};

/* The records of list from fetch_offset to before hi, as the fetcher filters them: only when
   the first is before fetch_offset or the last at or past hi. A new reference (list itself when
   nothing is dropped), NULL on a Python error. */
static PyObject *
in_window(PyObject *list, PyObject *fetch_offset, PyObject *hi)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (n == 0)
        return Py_NewRef(list);
    PyObject *first = PyTuple_GET_ITEM(PyList_GET_ITEM(list, 0), CR_OFFSET);
    PyObject *last = PyTuple_GET_ITEM(PyList_GET_ITEM(list, n - 1), CR_OFFSET);
    int before = PyObject_RichCompareBool(first, fetch_offset, Py_LT);
    if (before < 0)
        return NULL;
    int past = before ? 0 : PyObject_RichCompareBool(last, hi, Py_GE);
    if (past < 0)
        return NULL;
    if (!before && !past)
        return Py_NewRef(list);
    PyObject *kept = PyList_New(0);
    if (!kept)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *record = PyList_GET_ITEM(list, k);
        PyObject *offset = PyTuple_GET_ITEM(record, CR_OFFSET);
        int from = PyObject_RichCompareBool(fetch_offset, offset, Py_LE);
        int below = from > 0 ? PyObject_RichCompareBool(offset, hi, Py_LT) : from;
        if (below < 0 || (below > 0 && PyList_Append(kept, record) < 0)) {
            Py_DECREF(kept);
            return NULL;
        }
    }
    return kept;
}

PyDoc_STRVAR(consumer_records_doc,
"consumer_records(record_cls, data, count, base_offset, base_ts, log_append_time,\n"
"                 fetch_offset, hi, topic, partition, timestamp_type, leader_epoch)\n"
"    -> list | None\n\n"
"The records of an uncompressed records section as the consumer's fetcher builds them\n"
"(record_cls: ConsumerRecord's 13 fields), only those with fetch_offset <= offset < hi\n"
"(filtered as the fetcher filters), every timestamp log_append_time when it is not None;\n"
"None when the section is not well formed or does not hold count records.");

static PyObject *
consumer_records(PyObject *module, PyObject *args)
{
    PyObject *cls, *log_append_time, *fetch_offset, *hi, *topic, *partition, *timestamp_type,
             *leader_epoch;
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_ts;
    if (!PyArg_ParseTuple(args, "Oy*nLLOOOOOOO:consumer_records", &cls, &view, &count,
                          &base_offset, &base_ts, &log_append_time, &fetch_offset, &hi, &topic,
                          &partition, &timestamp_type, &leader_epoch))
        return NULL;
    PyObject *out = NULL, *kept;
    if (!check_tuple_class(cls) || !(out = PyList_New(0)))
        goto error;
    const uint8_t *p = view.buf;
    Py_ssize_t n = view.len, i = 0;
    while (i < n) {
        Fields f;
        Py_ssize_t header_size;
        int ok = decode_one(p, n, &i, base_offset, base_ts, log_append_time, &f, &header_size);
        if (ok < 0)
            goto error;
        if (ok == 0 || PyList_GET_SIZE(out) >= count) {   /* more records than the batch says */
            if (ok > 0)
                clear_fields(&f);
            goto not_ok;
        }
        PyObject *record = new_tuple_of(cls, CR_FIELDS);
        PyObject *key_size = PyLong_FromSsize_t(f.key == Py_None ? -1 : PyBytes_GET_SIZE(f.key));
        PyObject *value_size = PyLong_FromSsize_t(f.value == Py_None ? -1
                                                   : PyBytes_GET_SIZE(f.value));
        PyObject *headers_size = PyLong_FromSsize_t(header_size);
        if (!record || !key_size || !value_size || !headers_size) {
            Py_XDECREF(record);
            Py_XDECREF(key_size);
            Py_XDECREF(value_size);
            Py_XDECREF(headers_size);
            clear_fields(&f);
            goto error;
        }
        PyTuple_SET_ITEM(record, CR_TOPIC, Py_NewRef(topic));
        PyTuple_SET_ITEM(record, CR_PARTITION, Py_NewRef(partition));
        PyTuple_SET_ITEM(record, CR_OFFSET, f.offset);
        PyTuple_SET_ITEM(record, CR_TIMESTAMP, f.timestamp);
        PyTuple_SET_ITEM(record, CR_TIMESTAMP_TYPE, Py_NewRef(timestamp_type));
        PyTuple_SET_ITEM(record, CR_KEY, f.key);
        PyTuple_SET_ITEM(record, CR_VALUE, f.value);
        PyTuple_SET_ITEM(record, CR_HEADERS, f.headers);
        PyTuple_SET_ITEM(record, CR_CHECKSUM, Py_NewRef(Py_None));
        PyTuple_SET_ITEM(record, CR_KEY_SIZE, key_size);
        PyTuple_SET_ITEM(record, CR_VALUE_SIZE, value_size);
        PyTuple_SET_ITEM(record, CR_HEADER_SIZE, headers_size);
        PyTuple_SET_ITEM(record, CR_LEADER_EPOCH, Py_NewRef(leader_epoch));
        int appended = PyList_Append(out, record);
        Py_DECREF(record);
        if (appended < 0)
            goto error;
    }
    if (PyList_GET_SIZE(out) != count)
        goto not_ok;
    PyBuffer_Release(&view);
    kept = in_window(out, fetch_offset, hi);
    Py_DECREF(out);
    return kept;
not_ok:
    Py_DECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* Kafka's Utils.murmur2 (client/partitioner.py holds the reference): the producer hashes every
   keyed record, and in Python the hash was a fifth of send()'s time for short keys. */
PyDoc_STRVAR(murmur2_doc,
"murmur2(key) -> int: Kafka's 32-bit MurmurHash2 of the bytes (seed 0x9747b28c), signed.");

static PyObject *
murmur2(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *data = view.buf;
    Py_ssize_t length = view.len;
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t whole = length - (length & 3);
    for (Py_ssize_t i = 0; i < whole; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) |
                     ((uint32_t)data[i + 2] << 16) | ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    switch (length & 3) {
    case 3: h ^= (uint32_t)data[whole + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)data[whole + 1] << 8;  /* fall through */
    case 1: h ^= data[whole]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

static PyMethodDef methods[] = {
    {"walk_records", walk_records, METH_VARARGS, walk_records_doc},
    {"decode_records", decode_records, METH_VARARGS, decode_records_doc},
    {"consumer_records", consumer_records, METH_VARARGS, consumer_records_doc},
    {"murmur2", murmur2, METH_O, murmur2_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "raftka.common._records_ext",
    .m_doc = "C versions of the per-record loops of common/records.py and of the producer's key hash (see the source's first comment).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__records_ext(void)
{
    PyObject *module = PyModule_Create(&module_def);
    if (module && (PyModule_AddIntConstant(module, "RECORD_BYTES_MIN", RECORD_BYTES_MIN) < 0 ||
                   PyModule_AddIntConstant(module, "HEADERS_PER_RECORD_MAX",
                                           HEADERS_PER_RECORD_MAX) < 0))
        Py_CLEAR(module);
    return module;
}
