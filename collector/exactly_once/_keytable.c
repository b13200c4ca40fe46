/*
 * collector.exactly_once._keytable: the idempotency log's holders table, compactly.
 *
 * KeyTable maps a 16-byte key hash to the listing that holds it (a strong reference to any Python
 * object), as the dict it replaces did (collector.exactly_once.log.DictKeyTable, the fallback
 * when this is not built, has the same methods and results). What it saves is the dict's Python
 * objects: a listing's keys arrive as one byte string (its record's tail) and the table copies
 * each key into an open-addressing array of {key, holder, digest} slots, at most half full. The
 * dict kept a 16-byte bytes object (~64 bytes with its header), a dict entry, a tuple slot and a
 * set entry per key, and the listing a dict of body digests (the key again, an int): with 200,000
 * keys held (the default bound) ~250 bytes a key of scattered objects, each freed when its listing
 * was forgotten, 200,000 uploads after it was allocated, cold in every cache. Here a key is one
 * 32-byte slot, its digest in it (issue 41: ~7 us of a keyed upload's ~75 us under load), and a
 * byte of tag that probes read first (find_hashed).
 *
 * Linear probing with backward-shift deletion (no tombstones, so lookups never slow down with
 * churn). A slot's hash mixes both halves of the key with a per-table random seed (slot_hash), so
 * neither a crafted log record nor a foreign one clusters the probes.
 * The table grows at half full and never shrinks (its size follows --idempotency-max-keys).
 *
 * Methods (every key string is a whole number of 16-byte keys; anything else raises ValueError):
 *   take(keys, holder)    each key not held yet becomes held by holder; None when every key took,
 *                         else bytes with 1 per key that took and 0 per key held already (a key
 *                         repeated in keys takes once: its repeats find it held).
 *   release(keys, holder) each key held by holder (identity) is held no more; the count released.
 *   get(key, default=None) the holder of one key.
 *   set_digests(keys, holder, digests)
 *                         keep this process's body digest (Python's hash of the body; native int64s, one a key,
 *                         -1: none) with each key holder holds, while it holds it (never in the log); how many.
 *   digest(key)           that digest, or None (not held, or no digest kept).
 *   len(table)            keys held.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define KEY_BYTES 16
#define MIN_CAPACITY 1024

typedef struct {
    uint64_t lo, hi;     /* the key's 16 bytes */
    PyObject *holder;    /* NULL: empty slot */
    int64_t digest;      /* the body digest this process stored under the key; NO_DIGEST: none */
} Slot;

/* Python's hash() of bytes (what collector.guard.body_digest is) is never -1. */
#define NO_DIGEST INT64_C(-1)

typedef struct {
    PyObject_HEAD
    Slot *slots;
    uint8_t *tags;       /* per slot: 0 empty, else TAG of its key's hash (a probe reads these, not the slots) */
    size_t mask;         /* capacity - 1 (a power of two) */
    size_t count;
    uint64_t seed;
} KeyTable;

/* MurmurHash3's 64-bit finalizer: every input bit moves every output bit. */
static inline uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    return k ^ (k >> 33);
}

/* Both halves of the key, through the seed: keys alike in either half (crafted, or a test's sequential
 * numbers) land apart, so probe runs stay short whatever the keys are. */
static inline uint64_t slot_hash(const KeyTable *t, uint64_t lo, uint64_t hi) {
    return fmix64(fmix64(lo ^ t->seed) ^ hi);
}

static inline void load_key(const char *p, uint64_t *lo, uint64_t *hi) {
    memcpy(lo, p, 8);
    memcpy(hi, p + 8, 8);
}

/* A slot's tag: 7 bits of its hash the index does not use, never 0 (0 marks an empty slot). */
#define TAG(h) ((uint8_t)(((h) >> 57) | 0x80))

/* The slot holding the key, or the empty slot where it would go (tags[i] == 0). A probe reads the tags (one
 * byte a slot, 1/32 of the slots' memory) and a slot only when its tag matches: a key not held, what every
 * fresh upload's claim asks about, is found absent without touching the 32-byte slots, which at 200,000 keys
 * (16 MiB) are mostly out of the CPU's caches. */
static inline size_t find_hashed(const KeyTable *t, uint64_t h, uint64_t lo, uint64_t hi) {
    size_t i = (size_t)h & t->mask;
    uint8_t tag = TAG(h);
    for (;;) {
        uint8_t c = t->tags[i];
        if (c == 0 || (c == tag && t->slots[i].lo == lo && t->slots[i].hi == hi))
            return i;
        i = (i + 1) & t->mask;
    }
}

static inline size_t find(const KeyTable *t, uint64_t lo, uint64_t hi) {
    return find_hashed(t, slot_hash(t, lo, hi), lo, hi);
}

static int grow(KeyTable *t) {
    size_t old_capacity = t->mask + 1, capacity = old_capacity * 2;
    Slot *old = t->slots;
    uint8_t *old_tags = t->tags;
    Slot *slots = PyMem_Calloc(capacity, sizeof(Slot));
    uint8_t *tags = PyMem_Calloc(capacity, 1);
    if (slots == NULL || tags == NULL) {
        PyMem_Free(slots);
        PyMem_Free(tags);
        PyErr_NoMemory();
        return -1;
    }
    t->slots = slots;
    t->tags = tags;
    t->mask = capacity - 1;
    for (size_t j = 0; j < old_capacity; j++) {
        if (old_tags[j] != 0) {
            uint64_t h = slot_hash(t, old[j].lo, old[j].hi);
            size_t i = find_hashed(t, h, old[j].lo, old[j].hi);
            t->slots[i] = old[j];
            t->tags[i] = TAG(h);
        }
    }
    PyMem_Free(old);
    PyMem_Free(old_tags);
    return 0;
}

/* Empty slot i and shift the probe chain after it back (Knuth 6.4, Algorithm R). */
static void remove_at(KeyTable *t, size_t i) {
    size_t j = i;
    for (;;) {
        t->slots[i].holder = NULL;
        t->tags[i] = 0;
        for (;;) {
            j = (j + 1) & t->mask;
            if (t->tags[j] == 0)
                return;
            size_t home = (size_t)slot_hash(t, t->slots[j].lo, t->slots[j].hi) & t->mask;
            /* slot j may move to i unless its home lies cyclically in (i, j] */
            if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
                continue;
            break;
        }
        t->slots[i] = t->slots[j];
        t->tags[i] = t->tags[j];
        i = j;
    }
}

static int key_string(PyObject *arg, Py_buffer *view) {
    if (PyObject_GetBuffer(arg, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len % KEY_BYTES != 0) {
        PyErr_Format(PyExc_ValueError, "key hashes are not whole: %zd bytes is not a multiple of %d", view->len,
                     KEY_BYTES);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The arguments of a method given (keys, holder[, ...]): their count checked, the key string's buffer taken. */
static int keys_arguments(const char *signature, Py_ssize_t expected, Py_ssize_t nargs, PyObject *const *args,
                          Py_buffer *view) {
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", signature, expected);
        return -1;
    }
    return key_string(args[0], view);
}

static PyObject *KeyTable_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (!_PyArg_NoPositional("KeyTable", args) || !_PyArg_NoKeywords("KeyTable", kwds))
        return NULL;
    KeyTable *t = (KeyTable *)type->tp_alloc(type, 0);
    if (t == NULL)
        return NULL;
    t->slots = PyMem_Calloc(MIN_CAPACITY, sizeof(Slot));
    t->tags = PyMem_Calloc(MIN_CAPACITY, 1);
    if (t->slots == NULL || t->tags == NULL) {
        Py_DECREF(t);
        return PyErr_NoMemory();
    }
    t->mask = MIN_CAPACITY - 1;
    t->count = 0;
    if (_PyOS_URandomNonblock(&t->seed, sizeof(t->seed)) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

static void KeyTable_dealloc(KeyTable *t) {
    if (t->slots != NULL) {
        for (size_t j = 0; j <= t->mask; j++)
            Py_XDECREF(t->slots[j].holder);
        PyMem_Free(t->slots);
    }
    PyMem_Free(t->tags);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *KeyTable_take(KeyTable *t, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    if (keys_arguments("take(keys, holder)", 2, nargs, args, &view) < 0)
        return NULL;
    PyObject *holder = args[1];
    Py_ssize_t n = view.len / KEY_BYTES;
    const char *keys = view.buf;
    char *taken = NULL;  /* allocated at the first key that does not take */
    PyObject *result = NULL;
    /* room for every key first: a table that cannot grow is left as it was, never half taken */
    while ((t->count + (size_t)n) * 2 > t->mask + 1) {
        if (grow(t) < 0)
            goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        uint64_t lo, hi;
        load_key(keys + k * KEY_BYTES, &lo, &hi);
        uint64_t h = slot_hash(t, lo, hi);
        size_t i = find_hashed(t, h, lo, hi);
        if (t->tags[i] == 0) {
            t->tags[i] = TAG(h);
            t->slots[i].lo = lo;
            t->slots[i].hi = hi;
            Py_INCREF(holder);
            t->slots[i].holder = holder;
            t->slots[i].digest = NO_DIGEST;
            t->count++;
            if (taken != NULL)
                taken[k] = 1;
        } else {
            if (taken == NULL) {
                taken = PyMem_Malloc(n);
                if (taken == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                memset(taken, 1, (size_t)k);
            }
            taken[k] = 0;
        }
    }
    if (taken == NULL) {
        result = Py_NewRef(Py_None);
    } else {
        result = PyBytes_FromStringAndSize(taken, n);
    }
done:
    PyMem_Free(taken);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *KeyTable_release(KeyTable *t, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    if (keys_arguments("release(keys, holder)", 2, nargs, args, &view) < 0)
        return NULL;
    PyObject *holder = args[1];
    Py_ssize_t n = view.len / KEY_BYTES, released = 0;
    const char *keys = view.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        uint64_t lo, hi;
        load_key(keys + k * KEY_BYTES, &lo, &hi);
        size_t i = find(t, lo, hi);
        if (t->tags[i] != 0 && t->slots[i].holder == holder) {
            remove_at(t, i);
            t->count--;
            released++;
            Py_DECREF(holder);  /* last: the table is consistent if this frees the holder */
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(released);
}

static PyObject *KeyTable_get(KeyTable *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(key, default=None) takes 1 or 2 arguments");
        return NULL;
    }
    PyObject *fallback = nargs == 2 ? args[1] : Py_None;
    PyObject *key = args[0];
    if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) != KEY_BYTES)
        return Py_NewRef(fallback);  /* as a dict of 16-byte keys: anything else is not in it */
    uint64_t lo, hi;
    load_key(PyBytes_AS_STRING(key), &lo, &hi);
    size_t i = find(t, lo, hi);
    return Py_NewRef(t->tags[i] != 0 ? t->slots[i].holder : fallback);
}

static PyObject *KeyTable_set_digests(KeyTable *t, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view, digests;
    if (keys_arguments("set_digests(keys, holder, digests)", 3, nargs, args, &view) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &digests, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t n = view.len / KEY_BYTES, kept = 0;
    if (digests.len != n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "%zd digests of 8 bytes for %zd keys: give one a key", digests.len, n);
        goto done;
    }
    PyObject *holder = args[1];
    const char *keys = view.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t digest;
        memcpy(&digest, (const char *)digests.buf + k * sizeof(int64_t), sizeof(digest));
        if (digest == NO_DIGEST)
            continue;
        uint64_t lo, hi;
        load_key(keys + k * KEY_BYTES, &lo, &hi);
        size_t i = find(t, lo, hi);
        if (t->tags[i] != 0 && t->slots[i].holder == holder) {
            t->slots[i].digest = digest;
            kept++;
        }
    }
done:
    PyBuffer_Release(&digests);
    PyBuffer_Release(&view);
    return PyErr_Occurred() ? NULL : PyLong_FromSsize_t(kept);
}

static PyObject *KeyTable_digest(KeyTable *t, PyObject *key) {
    if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) != KEY_BYTES)
        Py_RETURN_NONE;
    uint64_t lo, hi;
    load_key(PyBytes_AS_STRING(key), &lo, &hi);
    size_t i = find(t, lo, hi);
    if (t->tags[i] == 0 || t->slots[i].digest == NO_DIGEST)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(t->slots[i].digest);
}

static Py_ssize_t KeyTable_len(KeyTable *t) {
    return (Py_ssize_t)t->count;
}

static PyMethodDef KeyTable_methods[] = {
    {"take", (PyCFunction)(void (*)(void))KeyTable_take, METH_FASTCALL,
     "take(keys, holder): hold each key not held yet; None if every key took, else a 1/0 byte per key."},
    {"release", (PyCFunction)(void (*)(void))KeyTable_release, METH_FASTCALL,
     "release(keys, holder): drop each key held by holder; the count dropped."},
    {"get", (PyCFunction)(void (*)(void))KeyTable_get, METH_FASTCALL,
     "get(key, default=None): the holder of a 16-byte key."},
    {"set_digests", (PyCFunction)(void (*)(void))KeyTable_set_digests, METH_FASTCALL,
     "set_digests(keys, holder, digests): keep a body digest (int64, -1: none) with each key holder holds."},
    {"digest", (PyCFunction)KeyTable_digest, METH_O,
     "digest(key): the body digest kept with a held key, or None."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods KeyTable_as_sequence = {
    .sq_length = (lenfunc)KeyTable_len,
};

static PyTypeObject KeyTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "collector.exactly_once._keytable.KeyTable",
    .tp_basicsize = sizeof(KeyTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The idempotency log's holders: 16-byte key hash -> the listing holding it (see the module's header).",
    .tp_new = KeyTable_new,
    .tp_dealloc = (destructor)KeyTable_dealloc,
    .tp_methods = KeyTable_methods,
    .tp_as_sequence = &KeyTable_as_sequence,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "collector.exactly_once._keytable",
    "The idempotency log's holders table (collector.exactly_once.keys).", -1, NULL,
};

PyMODINIT_FUNC PyInit__keytable(void) {
    if (PyType_Ready(&KeyTableType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "KeyTable", (PyObject *)&KeyTableType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
