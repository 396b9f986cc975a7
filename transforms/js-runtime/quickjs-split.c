/*
 * QuickJS with a fast path for RegExp.prototype[Symbol.split], an allocator that keeps an
 * emptied arena for the next call, shapes kept past their last object, short copies made in place,
 * new properties of ordinary objects added directly and a leaner js_free_rt, compiled in place of
 * rquickjs-sys's quickjs.c (zig-cc swaps this file in for it, so QuickJS's internals are in scope
 * here).
 * docs/performance.md, "QuickJS's own costs", has what each saves.
 *
 * The specification's split (ECMA-262, RegExp.prototype[@@split]) builds a new sticky RegExp from
 * the separator through its species constructor, reads its `flags` through eight getters, and
 * then runs `exec` at every position of the string. QuickJS does exactly that, so
 * `title.split(/\s+/)` compiled a regular expression and tried it at each character: a quarter
 * of a small transform's call (docs/performance.md, "A fresh JavaScript instance (issue 50)").
 * When none of those steps can be observed (the separator is a plain RegExp and the built-ins
 * they go through are the original ones) the result is the same as matching the separator's own
 * compiled pattern forward from each position, which is what engines do (V8's fast path); any
 * other separator takes QuickJS's own implementation, step by step as the specification has it.
 *
 * Tied to the QuickJS of rquickjs-sys 0.14.0 (quickjs-ng, QJS_VERSION 0.16.2): it reads
 * QuickJS's internals (shapes, properties, the flag getters' C functions and magics, lre_exec's
 * results). After an upgrade of rquickjs-sys, check them against the new quickjs.c, above all
 * the `flags` getter (js_regexp_get_flags): one that reads a flag not checked in
 * hookgate_split_is_plain would let a program change that flag's getter unseen.
 */
/* QuickJS's js_free_shape0, which frees a shape whose last reference went, is compiled as
   quickjs_free_shape0, and its one caller, js_free_shape, calls hookgate_free_shape0 instead
   (below: it may keep the shape). The macro tells the two apart by the first token of the first
   argument: the definition's `JSRuntime *rt`, the call's `rt`. */
struct JSRuntime;
struct JSShape;
static void hookgate_free_shape0(struct JSRuntime *rt, struct JSShape *sh);
#define js_free_shape0(rt, sh) HOOKGATE_FREE_SHAPE0_##rt, sh)
#define HOOKGATE_FREE_SHAPE0_JSRuntime quickjs_free_shape0(JSRuntime
#define HOOKGATE_FREE_SHAPE0_rt hookgate_free_shape0(rt
/* QuickJS's js_free_rt likewise: compiled as quickjs_free_rt, its callers in quickjs.c (whose
   first argument is `rt` or `ctx->rt`) calling hookgate_free_rt (below: the same, leaner), and
   js_free_rt defined again after the include. */
static void hookgate_free_rt(struct JSRuntime *rt, void *ptr);
#define js_free_rt(rt, ptr) HOOKGATE_FREE_RT_##rt, ptr)
#define HOOKGATE_FREE_RT_JSRuntime quickjs_free_rt(JSRuntime
#define HOOKGATE_FREE_RT_rt hookgate_free_rt(rt
#define HOOKGATE_FREE_RT_ctx hookgate_free_rt(ctx
/* QuickJS's JS_DefinePropertyValue likewise: compiled as quickjs_define_property_value, its
   callers in quickjs.c (`ctx` first) calling hookgate_define_property_value (below), and
   JS_DefinePropertyValue defined again after the include. quickjs.h first, for its types. */
#include "quickjs.h"
int quickjs_define_property_value(JSContext *ctx, JSValueConst this_obj, JSAtom prop,
                                  JSValue val, int flags);
static int hookgate_define_property_value(JSContext *ctx, JSValueConst this_obj, JSAtom prop,
                                          JSValue val, int flags);
#define JS_DefinePropertyValue(ctx, ...) HOOKGATE_DEFINE_VALUE_##ctx, __VA_ARGS__)
#define HOOKGATE_DEFINE_VALUE_JSContext quickjs_define_property_value(JSContext
#define HOOKGATE_DEFINE_VALUE_ctx hookgate_define_property_value(ctx

/* QuickJS's copies of a length known only at run time (a string's characters into a new or
   longer string, mostly) compile to WebAssembly's `memory.copy`, which wasmtime runs as a call
   out of the guest into the host's memcpy: about 70 instructions whatever the length, where a
   call copies tens of bytes at a time, some thirty times. hookgate_copy copies up to
   HOOKGATE_INLINE_COPY bytes in place, every byte loaded before any is stored (so overlapping
   copies are as memmove's), and leaves longer ones to `memory.copy`. A copy of a constant length
   stays the compiler's (a load and a store). Only quickjs.c's `memcpy` is this one: string.h is
   included first, so its declaration is the C library's. */
#include <stdint.h>
#include <string.h>
#define HOOKGATE_INLINE_COPY 64

static inline __attribute__((always_inline)) uint64_t hookgate_load8(const unsigned char *p)
{
    uint64_t v;
    __builtin_memcpy(&v, p, 8);
    return v;
}

static inline __attribute__((always_inline)) void hookgate_store8(unsigned char *p, uint64_t v)
{
    __builtin_memcpy(p, &v, 8);
}

static inline __attribute__((always_inline)) void *hookgate_copy(void *dst, const void *src,
                                                                   size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;

    if (n > HOOKGATE_INLINE_COPY)
        return __builtin_memmove(dst, src, n);
    if (n > 32) {
        /* 33 to 64: 32 bytes from each end, overlapping in the middle. */
        uint64_t a0 = hookgate_load8(s), a1 = hookgate_load8(s + 8);
        uint64_t a2 = hookgate_load8(s + 16), a3 = hookgate_load8(s + 24);
        uint64_t z0 = hookgate_load8(s + n - 32), z1 = hookgate_load8(s + n - 24);
        uint64_t z2 = hookgate_load8(s + n - 16), z3 = hookgate_load8(s + n - 8);
        hookgate_store8(d, a0);
        hookgate_store8(d + 8, a1);
        hookgate_store8(d + 16, a2);
        hookgate_store8(d + 24, a3);
        hookgate_store8(d + n - 32, z0);
        hookgate_store8(d + n - 24, z1);
        hookgate_store8(d + n - 16, z2);
        hookgate_store8(d + n - 8, z3);
    } else if (n > 16) {
        uint64_t a0 = hookgate_load8(s), a1 = hookgate_load8(s + 8);
        uint64_t z0 = hookgate_load8(s + n - 16), z1 = hookgate_load8(s + n - 8);
        hookgate_store8(d, a0);
        hookgate_store8(d + 8, a1);
        hookgate_store8(d + n - 16, z0);
        hookgate_store8(d + n - 8, z1);
    } else if (n >= 8) {
        uint64_t a = hookgate_load8(s), z = hookgate_load8(s + n - 8);
        hookgate_store8(d, a);
        hookgate_store8(d + n - 8, z);
    } else if (n >= 4) {
        uint32_t a, z;
        __builtin_memcpy(&a, s, 4);
        __builtin_memcpy(&z, s + n - 4, 4);
        __builtin_memcpy(d, &a, 4);
        __builtin_memcpy(d + n - 4, &z, 4);
    } else if (n > 0) {
        unsigned char a = s[0], m = s[n / 2], z = s[n - 1];
        d[0] = a;
        d[n / 2] = m;
        d[n - 1] = z;
    }
    return dst;
}

#define memcpy(dst, src, n) \
    (__builtin_constant_p(n) ? __builtin_memcpy(dst, src, n) : hookgate_copy(dst, src, n))
#include "quickjs.c"
#undef memcpy
#undef js_free_shape0
#undef js_free_rt

/* js_free_rt as QuickJS's (the accounting, then js_arena_free), for a block of an arena, the
   kind a call frees by the dozen: QuickJS's own is compiled into a function that makes a stack
   frame on every call (for its underflow check's printf) and reads the block's header twice
   (js_arena_usable_size, then js_arena_free). The same count and size are taken off the same
   state, so QuickJS's memory limit and its collector's threshold see what they saw. A large
   block, the zero-size one and an underflow (QuickJS's message and abort) go to QuickJS's own. */
static void hookgate_free_rt(JSRuntime *rt, void *ptr)
{
    JSMallocState *s = &rt->malloc_state;
    JSMallocBlockHeader *b;
    JSArena *ar;
    unsigned int block_idx, block_size_idx, block_size;
    size_t free_size;

    if (!ptr)
        return;
    b = container_of(ptr, JSMallocBlockHeader, user_data);
    block_idx = b->u.block_idx;
    block_size_idx = b->block_size_idx;
    if (unlikely(block_idx == JS_ARENA_FREE_NIL)) {
        quickjs_free_rt(rt, ptr);
        return;
    }
    block_size = arena_block_sizes[block_size_idx];
    free_size = block_size - sizeof(JSMallocBlockHeader) + MALLOC_OVERHEAD;
    if (unlikely(free_size > s->malloc_size)) {
        quickjs_free_rt(rt, ptr);
        return;
    }
    s->malloc_count--;
    s->malloc_size -= free_size;
    ar = (JSArena *)((uint8_t *)b - (size_t)block_size * block_idx - sizeof(JSArena));
    b->u.free_next = ar->first_free_block;
    ar->first_free_block = block_idx;
    if (unlikely(ar->n_used_blocks == ar->n_blocks))
        list_add(&ar->free_link, &rt->arena_state.free_arena_list[block_size_idx]);
    if (unlikely(--ar->n_used_blocks == 0)) {
        list_del(&ar->link);
        list_del(&ar->free_link);
        rt->mf.js_free(rt->malloc_state.opaque, ar);
    }
}

/* The public js_free_rt, for code outside quickjs.c (quickjs.h declared quickjs_free_rt). */
void js_free_rt(JSRuntime *rt, void *ptr);
void js_free_rt(JSRuntime *rt, void *ptr)
{
    hookgate_free_rt(rt, ptr);
}


#undef JS_DefinePropertyValue

/* JS_DefinePropertyValue of a property that an ordinary object (no exotic behaviour: not an
   array, a typed array, a Proxy, a string's or an arguments object) does not have, while it is
   extensible: what QuickJS's own does then, through JS_DefineProperty and JS_CreateProperty, is
   add the property with the attributes asked for and store the value, which the caller hands
   over (QuickJS takes a reference to it and drops the caller's). The objects a call makes get
   their properties this way: the arguments, the result's literal, JSON.parse's objects, a new
   function's `length` and `name`. Anything else is QuickJS's own, step by step. */
static inline __attribute__((always_inline)) int
hookgate_define_value(JSContext *ctx, JSValueConst this_obj, JSAtom prop, JSValue val, int flags)
{
    JSObject *p;
    JSProperty *pr;

    if (JS_VALUE_GET_TAG(this_obj) == JS_TAG_OBJECT &&
        !(flags & (JS_PROP_HAS_GET | JS_PROP_HAS_SET))) {
        p = JS_VALUE_GET_OBJ(this_obj);
        if (!p->is_exotic && !p->fast_array && p->extensible &&
            !find_own_property(&pr, p, prop)) {
            pr = add_property(ctx, p, prop, flags & JS_PROP_C_W_E);
            if (unlikely(!pr)) {
                JS_FreeValue(ctx, val);
                return -1;
            }
            pr->u.value = val;
            return true;
        }
    }
    return quickjs_define_property_value(ctx, this_obj, prop, val, flags);
}

/* For quickjs.c's callers. */
static int hookgate_define_property_value(JSContext *ctx, JSValueConst this_obj, JSAtom prop,
                                          JSValue val, int flags)
{
    return hookgate_define_value(ctx, this_obj, prop, val, flags);
}

/* The public JS_DefinePropertyValue, for the runtime's Rust (rquickjs, arguments.rs): the same,
   compiled into it rather than called. */
int JS_DefinePropertyValue(JSContext *ctx, JSValueConst this_obj, JSAtom prop, JSValue val,
                           int flags)
{
    return hookgate_define_value(ctx, this_obj, prop, val, flags);
}

/* Atoms of the flag getters that QuickJS does not predefine, taken when the fast path is
   installed on `hookgate_flag_atoms_ctx`, and kept for good: a held atom cannot be freed and
   reused for another name while RegExp.prototype's properties come and go. A static is safe
   because a WebAssembly instance's memory is its own and the runtime makes one runtime and one
   context in it (lib.rs, `load`); should another context be installed, the atoms and the
   context they were taken for are replaced together, and a context whose atoms they are not
   takes QuickJS's own split (hookgate_split_is_plain checks the context first). The atoms live
   as long as the instance: its runtime is never freed. */
static JSAtom hookgate_flag_atoms[6];
static JSContext *hookgate_flag_atoms_ctx;

/* Whether `obj`'s own property `atom` is still the getter QuickJS defined: a C function `fn`
   with `magic`. */
static bool hookgate_is_getter(JSObject *obj, JSAtom atom, JSCFunctionType fn, int magic)
{
    JSProperty *pr;
    JSShapeProperty *prs = find_own_property(&pr, obj, atom);
    JSObject *getter;

    if (!prs || (prs->flags & JS_PROP_TMASK) != JS_PROP_GETSET || !pr->u.getset.getter)
        return false;
    getter = pr->u.getset.getter;
    return getter->class_id == JS_CLASS_C_FUNCTION &&
           getter->u.cfunc.c_function.generic == fn.generic &&
           getter->u.cfunc.magic == magic;
}

/* Whether `obj`'s own property `atom` is still the method QuickJS defined, `fn` (or not yet
   instantiated, which no one can have changed). */
static bool hookgate_is_method(JSObject *obj, JSAtom atom, JSCFunction *fn)
{
    JSProperty *pr;
    JSShapeProperty *prs = find_own_property(&pr, obj, atom);
    JSObject *f;

    if (!prs)
        return false;
    if ((prs->flags & JS_PROP_TMASK) == JS_PROP_AUTOINIT)
        return true;
    if ((prs->flags & JS_PROP_TMASK) != JS_PROP_NORMAL ||
        JS_VALUE_GET_TAG(pr->u.value) != JS_TAG_OBJECT)
        return false;
    f = JS_VALUE_GET_OBJ(pr->u.value);
    return f->class_id == JS_CLASS_C_FUNCTION && f->u.cfunc.c_function.generic == fn;
}

/* Whether splitting with `rx` runs no code but QuickJS's own, reads nothing a program set, and
   so can match `rx`'s pattern directly: `rx` is a RegExp with no own property but `lastIndex`
   and RegExp.prototype as its prototype, and what the specification's steps read (its
   `constructor`, RegExp[@@species], `flags` and the eight flag getters, @@match, `exec`) is as
   QuickJS defined it. */
static bool hookgate_split_is_plain(JSContext *ctx, JSValueConst rx)
{
    JSObject *p, *proto, *ctor;
    JSShape *sh;
    JSProperty *pr;
    JSShapeProperty *prs;
    JSCFunctionType flag = { .getter_magic = js_regexp_get_flag };
    JSCFunctionType flags = { .getter = js_regexp_get_flags };
    JSCFunctionType this_getter = { .getter = js_get_this };

    if (ctx != hookgate_flag_atoms_ctx || JS_VALUE_GET_TAG(rx) != JS_TAG_OBJECT)
        return false;
    p = JS_VALUE_GET_OBJ(rx);
    if (p->class_id != JS_CLASS_REGEXP)
        return false;
    proto = JS_VALUE_GET_OBJ(ctx->class_proto[JS_CLASS_REGEXP]);
    sh = p->shape;
    if (sh != ctx->regexp_shape &&
        !(sh->proto == proto && sh->prop_count == 1 && sh->deleted_prop_count == 0 &&
          get_shape_prop(sh)[0].atom == JS_ATOM_lastIndex))
        return false;
    /* SpeciesConstructor: rx.constructor is RegExp, and RegExp[@@species] returns it. */
    prs = find_own_property(&pr, proto, JS_ATOM_constructor);
    if (!prs || (prs->flags & JS_PROP_TMASK) != JS_PROP_NORMAL ||
        !js_same_value(ctx, pr->u.value, ctx->regexp_ctor))
        return false;
    ctor = JS_VALUE_GET_OBJ(ctx->regexp_ctor);
    if (!hookgate_is_getter(ctor, JS_ATOM_Symbol_species, this_getter, 0))
        return false;
    /* rx.flags, through the getters it reads. */
    if (!hookgate_is_getter(proto, JS_ATOM_flags, flags, 0) ||
        !hookgate_is_getter(proto, JS_ATOM_global, flag, LRE_FLAG_GLOBAL) ||
        !hookgate_is_getter(proto, JS_ATOM_unicode, flag, LRE_FLAG_UNICODE) ||
        !hookgate_is_getter(proto, hookgate_flag_atoms[0], flag, LRE_FLAG_INDICES) ||
        !hookgate_is_getter(proto, hookgate_flag_atoms[1], flag, LRE_FLAG_IGNORECASE) ||
        !hookgate_is_getter(proto, hookgate_flag_atoms[2], flag, LRE_FLAG_MULTILINE) ||
        !hookgate_is_getter(proto, hookgate_flag_atoms[3], flag, LRE_FLAG_DOTALL) ||
        !hookgate_is_getter(proto, hookgate_flag_atoms[4], flag, LRE_FLAG_UNICODE_SETS) ||
        !hookgate_is_getter(proto, hookgate_flag_atoms[5], flag, LRE_FLAG_STICKY))
        return false;
    /* new RegExp(rx, flags) reads rx[@@match] (a data property is read without running code,
       and the pattern is rx's whatever it says); the splitter's exec is RegExp.prototype.exec. */
    prs = find_own_property(&pr, proto, JS_ATOM_Symbol_match);
    if (!prs || (prs->flags & JS_PROP_TMASK) == JS_PROP_GETSET)
        return false;
    return hookgate_is_method(proto, JS_ATOM_exec, js_regexp_exec);
}

/* Appends `value` (taken) to `array`, the split's own new array (so a fast, extensible Array no
   program has seen, where CreateDataPropertyOrThrow at index `length` only stores the element):
   straight into its elements, without making the index a property key. Room for 8 elements is
   made at the first, so that a short split grows them once rather than 1, 2, 3, 4, 6, 9 (an
   array's capacity cannot be observed). False on an exception. */
static bool hookgate_push(JSContext *ctx, JSValueConst array, int64_t *length, JSValue value)
{
    JSObject *p = JS_VALUE_GET_OBJ(array);

    if (JS_IsException(value))
        return false;
    if (p->u.array.u1.size == 0 && expand_fast_array(ctx, p, 8) < 0) {
        JS_FreeValue(ctx, value);
        return false;
    }
    (*length)++;
    return add_fast_array_element(ctx, p, value, JS_PROP_THROW) >= 0;
}

/* libregexp.c's opcodes and header, which it keeps to itself: the same list of ops, numbered
   the same way, and the offsets of the header's fields that bytecode starts with. */
enum {
#define DEF(id, size) HOOKGATE_REOP_##id,
#include "libregexp-opcode.h"
#undef DEF
};
#define HOOKGATE_RE_HEADER_BYTECODE_LEN 4
#define HOOKGATE_RE_HEADER_LEN 8

/* The test of one character that every match of the search pattern `bc` starts with: a search
   pattern (not sticky) is compiled as a loop that tries each position in turn, each attempt
   starting with the pattern's first op; when that op is `\s`, `\S` or one character, no
   position whose character fails it can start a match. Returns the op (space, not_space or
   char), or 0 when the pattern starts otherwise. */
static int hookgate_first_test(const uint8_t *bc, uint16_t *c)
{
    /* split_goto_first +6; any; goto -11; save_start 0: the search loop (lre_compile). */
    static const uint8_t search[] = {
        HOOKGATE_REOP_split_goto_first, 6, 0, 0, 0, HOOKGATE_REOP_any, HOOKGATE_REOP_goto, 0xf5, 0xff, 0xff, 0xff,
        HOOKGATE_REOP_save_start, 0,
    };
    const uint8_t *op = bc + HOOKGATE_RE_HEADER_LEN;

    if (get_u32(bc + HOOKGATE_RE_HEADER_BYTECODE_LEN) < sizeof(search) + 3 ||
        memcmp(op, search, sizeof(search)) != 0)
        return 0;
    op += sizeof(search);
    switch (op[0]) {
    case HOOKGATE_REOP_space:
    case HOOKGATE_REOP_not_space:
        return op[0];
    case HOOKGATE_REOP_char:
        *c = get_u16(op + 1);
        return HOOKGATE_REOP_char;
    default:
        return 0;
    }
}

/* The first position from `q` on whose code unit passes `test` (hookgate_first_test), else
   `size`. Tested by code unit, which is what the op tests wherever a match can start: a
   surrogate is never white space, and a character of the pattern equals a code point only where
   its code unit does. The one candidate that can lie inside a surrogate pair, a lone low
   surrogate searched for with the unicode flag, is still right: lre_exec, started inside a pair,
   steps back to its start, where the pattern then fails against the whole code point. */
static int64_t hookgate_next_candidate(const uint8_t *buf, int shift, int64_t q, uint32_t size,
                                       int test, uint16_t c)
{
    for (; q < size; q++) {
        uint32_t unit = shift ? ((const uint16_t *)buf)[q] : buf[q];
        switch (test) {
        case HOOKGATE_REOP_space:
            if (lre_is_space(unit))
                return q;
            break;
        case HOOKGATE_REOP_not_space:
            if (!lre_is_space(unit))
                return q;
            break;
        default:
            if (unit == c)
                return q;
            break;
        }
    }
    return size;
}

/* The specification's split loop (steps 19-24) with a plain separator: where it tries the sticky
   splitter at q, q+1, ... until one matches, the separator's own pattern searches forward from q
   once (a pattern without the sticky flag is compiled as a search), which finds the same first
   position and the same match there. */
static JSValue hookgate_split_plain(JSContext *ctx, JSValueConst rx, JSValueConst str,
                                    JSValueConst limit)
{
    JSRegExp *re = &JS_VALUE_GET_OBJ(rx)->u.regexp;
    JSString *strp = JS_VALUE_GET_STRING(str);
    uint8_t *bc = str8(re->bytecode), *buf = str8(strp), **capture = NULL;
    int re_flags = lre_get_flags(bc), shift = strp->is_wide_char;
    int captures = lre_get_capture_count(bc), alloc_count = lre_get_alloc_count(bc);
    bool unicode = (re_flags & (LRE_FLAG_UNICODE | LRE_FLAG_UNICODE_SETS)) != 0;
    bool sticky = (re_flags & LRE_FLAG_STICKY) != 0;
    uint32_t lim, size = strp->len;
    int64_t p = 0, q = 0, start, e, length = 0;
    int rc, i, test;
    uint16_t test_char = 0;
    JSValue A;

    A = JS_NewArray(ctx);
    if (JS_IsException(A))
        return A;
    if (JS_IsUndefined(limit)) {
        lim = 0xffffffff;
    } else if (JS_ToUint32(ctx, &lim, limit) < 0) {
        goto exception;
    }
    if (lim == 0)
        return A;
    if (alloc_count > 0) {
        capture = js_malloc(ctx, sizeof(capture[0]) * alloc_count);
        if (!capture)
            goto exception;
    }
    if (size == 0) {
        /* The splitter is sticky: only a match at 0 counts. */
        rc = lre_exec(capture, bc, buf, 0, 0, shift, ctx);
        if (rc < 0)
            goto exec_error;
        if (rc == 0 || capture[0] != buf)
            goto add_tail;
        goto done;
    }
    test = sticky ? 0 : hookgate_first_test(bc, &test_char);
    while (q < size) {
        /* Where no match can start, the search need not try: it starts at the first candidate. */
        if (test) {
            q = hookgate_next_candidate(buf, shift, q, size, test, test_char);
            if (q == size)
                break;
        }
        rc = lre_exec(capture, bc, buf, q, size, shift, ctx);
        if (rc < 0)
            goto exec_error;
        if (rc == 0) {
            if (!sticky)
                break; /* no position from q on matches */
            q = string_advance_index(strp, q, unicode);
            continue;
        }
        start = (capture[0] - buf) >> shift;
        e = (capture[1] - buf) >> shift;
        if (start >= size)
            break; /* the specification tries no position at the end */
        if (e > size)
            e = size;
        if (e == p) {
            q = string_advance_index(strp, start, unicode);
            continue;
        }
        if (!hookgate_push(ctx, A, &length, js_sub_string(ctx, strp, p, start)))
            goto exception;
        if (length == lim)
            goto done;
        p = e;
        for (i = 1; i < captures; i++) {
            JSValue sub = JS_UNDEFINED;
            if (capture[2 * i] && capture[2 * i + 1]) {
                sub = js_sub_string(ctx, strp, (capture[2 * i] - buf) >> shift,
                                    (capture[2 * i + 1] - buf) >> shift);
            }
            if (!hookgate_push(ctx, A, &length, sub))
                goto exception;
            if (length == lim)
                goto done;
        }
        q = p;
    }
add_tail:
    if (!hookgate_push(ctx, A, &length, js_sub_string(ctx, strp, p, size)))
        goto exception;
done:
    js_free(ctx, capture);
    return A;
exec_error:
    /* As js_regexp_exec answers each of lre_exec's failures. */
    switch (rc) {
    case LRE_RET_TIMEOUT:
        JS_ThrowInterrupted(ctx);
        break;
    case LRE_RET_MEMORY_ERROR:
        JS_ThrowInternalError(ctx, "out of memory in regexp execution");
        break;
    case LRE_RET_BYTECODE_ERROR:
        JS_ThrowInternalError(ctx, "corrupted bytecode in regexp execution");
        break;
    default:
        abort();
    }
exception:
    js_free(ctx, capture);
    JS_FreeValue(ctx, A);
    return JS_EXCEPTION;
}

/* RegExp.prototype[Symbol.split](string, limit). */
static JSValue hookgate_regexp_split(JSContext *ctx, JSValueConst this_val, int argc,
                                     JSValueConst *argv)
{
    JSValueConst args[2];
    JSValue str, ret;

    if (!JS_IsObject(this_val))
        return JS_ThrowTypeErrorNotAnObject(ctx);
    /* First, as in the specification: a `toString` run here may change what is checked next. */
    str = JS_ToString(ctx, argv[0]);
    if (JS_IsException(str))
        return str;
    /* The limit is converted after the steps checked: one that runs code (an object's valueOf,
       which could change RegExp.prototype.exec) goes the specification's way. */
    if (!JS_IsObject(argv[1]) && hookgate_split_is_plain(ctx, this_val)) {
        ret = hookgate_split_plain(ctx, this_val, str, argv[1]);
    } else {
        /* QuickJS's own, given the string already converted (converting it again runs nothing). */
        args[0] = str;
        args[1] = argv[1];
        ret = js_regexp_Symbol_split(ctx, this_val, 2, args);
    }
    JS_FreeValue(ctx, str);
    return ret;
}

/* QuickJS serves blocks of up to 512 bytes from 4 KB arenas, one list per size class, and hands
   an arena back to malloc as soon as its last block is freed (js_arena_free). A call that needs
   one block of a class whose arenas are all full so made a new arena and freed it at its end:
   every call, in a kept instance as in a fresh one (from the snapshot, where the arenas are as
   loading left them). The runtime's allocator below keeps the last arena that empties in each
   class, linked back in as an empty arena, and loading ends with one such arena in every class
   (hookgate_quickjs_leave_room): a call's blocks then come from arenas it finds, and an arena it
   empties stays for the next call.

   A kept arena must not make QuickJS's allocation fail where QuickJS alone would not, since at
   its memory cap a call must fail in the runtime's own allocation, which traps and is reported
   as a memory breach, rather than in QuickJS's, which throws (and then `null`, when the error
   itself cannot be made). So when malloc fails, every kept empty arena is handed back and the
   allocation tried again: QuickJS then finds what it would have found had it freed them.

   The arena is recognised by how js_arena_free gives it: unlinked from both of its lists by
   list_del, which leaves their links NULL, and with no block used. Nothing else reaches the
   runtime's free with its first word zero: a large block starts with its header's block_idx,
   JS_ARENA_FREE_NIL, and the runtime itself with its malloc functions. js_arena_free_all, at
   the runtime's end (only when loading fails: a loaded instance's runtime lives as long as the
   instance), gives arenas still linked, kept ones included, and the slots below are not read
   again: a new runtime resets them when it installs these functions. Check these after an
   upgrade of rquickjs-sys.
   A static, as the flag atoms are: the instance has one runtime (lib.rs, `load`). */
static JSArena *hookgate_kept_arena[JS_ARENA_BLOCK_SIZE_COUNT];

/* Hands every kept arena that is still empty back to malloc; whether any was. */
static bool hookgate_release_kept_arenas(void)
{
    bool released = false;
    int i;

    for (i = 0; i < JS_ARENA_BLOCK_SIZE_COUNT; i++) {
        JSArena *ar = hookgate_kept_arena[i];
        hookgate_kept_arena[i] = NULL;
        if (ar && ar->n_used_blocks == 0) {
            list_del(&ar->link);
            list_del(&ar->free_link);
            free(ar);
            released = true;
        }
    }
    return released;
}

/* Links `ar`, an empty arena, into its class's lists as the one kept: behind the arenas that
   have free blocks, so that those are filled first and it stays empty as long as they last. */
static void hookgate_keep_arena(JSRuntime *rt, JSArena *ar)
{
    int idx = ar->block_size_idx;

    list_add_tail(&ar->link, &rt->arena_state.arena_list[idx]);
    list_add_tail(&ar->free_link, &rt->arena_state.free_arena_list[idx]);
    hookgate_kept_arena[idx] = ar;
}

/* QuickJS looks a shape up by its prototype and properties (find_hashed_shape_proto and _prop)
   before it makes one, but frees a shape with its last object, so the shapes of the objects a
   call makes (the transform's result, the input's objects, their chains of one, two, ...
   properties) were made again in every call: cloned, grown a property at a time, freed. The
   runtime keeps the last HOOKGATE_KEPT_SHAPES hashed shapes whose last reference went, each held
   by one reference of its own, so that the next call finds them; the oldest is let go when a
   newer one is kept. Shapes are QuickJS's own and not observable: property order, enumeration
   and prototypes are the objects' as before. Kept only when keeping it holds nothing a program
   could see go: its prototype is none or a built-in class's prototype (the context holds those
   for good; Object.prototype and Array.prototype checked first, the rest by a search), its
   keys are strings (no symbol kept alive), and not while the garbage collector frees cycles,
   whose shapes' prototypes may be freed with them. Kept from the end of
   loading (hookgate_quickjs_leave_room) on, by the runtime the instance keeps for its life.
   Only shapes with room for at most HOOKGATE_KEPT_SHAPE_PROPERTIES properties are kept, a block
   of at most 240 bytes each, so all of them hold under 8 KB; and a kept shape holds its keys'
   atoms, names a sender chose (a payload's keys, a header's), so only shapes whose keys are at
   most HOOKGATE_KEPT_SHAPE_KEY_BYTES long are kept: the atoms they may hold alone stay under
   48 KB (512 of them, in blocks of at most 96 bytes), where a 256 KB key per call held 8 MB of
   a kept instance's memory. When malloc fails they stay held (hookgate_release_kept). */
#define HOOKGATE_KEPT_SHAPES 32
#define HOOKGATE_KEPT_SHAPE_PROPERTIES 16
#define HOOKGATE_KEPT_SHAPE_KEY_BYTES 64
static JSShape *hookgate_kept_shape[HOOKGATE_KEPT_SHAPES];
static unsigned hookgate_kept_shape_next;
static JSRuntime *hookgate_shapes_rt;

/* Whether keeping `sh` (a hashed shape) holds only what the context holds anyway. */
static bool hookgate_shape_keepable(JSRuntime *rt, JSShape *sh)
{
    JSContext *ctx = hookgate_flag_atoms_ctx;
    JSShapeProperty *pr = get_shape_prop(sh);
    uint32_t i;

    if (rt != hookgate_shapes_rt || !ctx || rt->gc_phase == JS_GC_PHASE_REMOVE_CYCLES ||
        sh->prop_size > HOOKGATE_KEPT_SHAPE_PROPERTIES)
        return false;
    if (sh->proto && sh->proto != JS_VALUE_GET_OBJ(ctx->class_proto[JS_CLASS_OBJECT]) &&
        sh->proto != JS_VALUE_GET_OBJ(ctx->class_proto[JS_CLASS_ARRAY])) {
        int k;
        for (k = 0; k < JS_CLASS_INIT_COUNT; k++) {
            if (JS_VALUE_GET_TAG(ctx->class_proto[k]) == JS_TAG_OBJECT &&
                JS_VALUE_GET_OBJ(ctx->class_proto[k]) == sh->proto)
                break;
        }
        if (k == JS_CLASS_INIT_COUNT)
            return false;
    }
    for (i = 0; i < sh->prop_count; i++, pr++) {
        JSAtomStruct *name;
        if (__JS_AtomIsConst(pr->atom))
            continue;
        name = rt->atom_array[pr->atom];
        if (name->atom_type != JS_ATOM_TYPE_STRING ||
            ((size_t)name->len << name->is_wide_char) > HOOKGATE_KEPT_SHAPE_KEY_BYTES)
            return false;
    }
    return true;
}

/* Drops the reference the runtime held on `sh`, freeing it when it was the last. */
static void hookgate_let_go_shape(JSRuntime *rt, JSShape *sh)
{
    if (--JS_REF_COUNT(sh) <= 0)
        quickjs_free_shape0(rt, sh);
}

/* js_free_shape0's replacement: `sh`'s last reference went. */
static void hookgate_free_shape0(JSRuntime *rt, JSShape *sh)
{
    JSShape *oldest;

    if (!sh->is_hashed || !hookgate_shape_keepable(rt, sh)) {
        quickjs_free_shape0(rt, sh);
        return;
    }
    JS_REF_COUNT(sh) = 1;
    oldest = hookgate_kept_shape[hookgate_kept_shape_next];
    hookgate_kept_shape[hookgate_kept_shape_next] = sh;
    hookgate_kept_shape_next = (hookgate_kept_shape_next + 1) % HOOKGATE_KEPT_SHAPES;
    if (oldest)
        hookgate_let_go_shape(rt, oldest);
}

/* Hands back what the runtime keeps when an allocation failed: the kept arenas that are still
   empty; whether any was. The kept shapes stay: inside a failed allocation QuickJS may hold one
   that only the runtime holds, by a bare pointer (add_property finds the shape an object moves
   to, grows the object's property array, and takes its reference only after), or be changing
   its atom table, which freeing a shape's atoms would change too. They are 32 blocks of at most
   240 bytes and their keys' atoms, and newer shapes take their places as before. */
static bool hookgate_release_kept(void)
{
    return hookgate_release_kept_arenas();
}

static void *hookgate_calloc(void *opaque, size_t count, size_t size)
{
    void *ptr = calloc(count, size);
    if (!ptr && hookgate_release_kept())
        ptr = calloc(count, size);
    return ptr;
}

static void *hookgate_malloc(void *opaque, size_t size)
{
    void *ptr = malloc(size);
    if (!ptr && hookgate_release_kept())
        ptr = malloc(size);
    return ptr;
}

static void *hookgate_realloc(void *opaque, void *ptr, size_t size)
{
    void *grown = realloc(ptr, size);
    if (!grown && hookgate_release_kept())
        grown = realloc(ptr, size);
    return grown;
}

/* free, but an arena js_arena_free emptied is kept when its class keeps no other empty one. */
static void hookgate_free(void *opaque, void *ptr)
{
    JSRuntime *rt = opaque;
    JSArena *ar = ptr, *kept;

    if (ptr && ar->free_link.prev == NULL && ar->link.prev == NULL && ar->n_used_blocks == 0) {
        kept = hookgate_kept_arena[ar->block_size_idx];
        if (!kept || kept == ar || kept->n_used_blocks != 0) {
            hookgate_keep_arena(rt, ar);
            return;
        }
    }
    free(ptr);
}

/* Makes QuickJS's runtime allocate through the functions above. They call the same malloc as
   QuickJS's own (js_def_malloc and the rest), so blocks allocated before are freed alike. */
static void hookgate_allocate_through_kept_arenas(JSRuntime *rt)
{
    int i;

    for (i = 0; i < JS_ARENA_BLOCK_SIZE_COUNT; i++)
        hookgate_kept_arena[i] = NULL;
    for (i = 0; i < HOOKGATE_KEPT_SHAPES; i++)
        hookgate_kept_shape[i] = NULL;
    hookgate_kept_shape_next = 0;
    hookgate_shapes_rt = NULL;
    rt->mf.js_calloc = hookgate_calloc;
    rt->mf.js_malloc = hookgate_malloc;
    rt->mf.js_free = hookgate_free;
    rt->mf.js_realloc = hookgate_realloc;
    rt->malloc_state.opaque = rt;
}

/* Installs the fast path on `ctx`'s RegExp.prototype: once, before any program runs (the
   runtime calls it right after creating the context). Returns 0, or -1 on an exception. */
int hookgate_quickjs_install(JSContext *ctx)
{
    static const char *const names[] = {
        "hasIndices", "ignoreCase", "multiline", "dotAll", "unicodeSets", "sticky",
    };
    JSValue split;
    int i;

    hookgate_allocate_through_kept_arenas(ctx->rt);
    hookgate_flag_atoms_ctx = NULL;
    for (i = 0; i < 6; i++) {
        hookgate_flag_atoms[i] = JS_NewAtom(ctx, names[i]);
        if (hookgate_flag_atoms[i] == JS_ATOM_NULL)
            return -1;
    }
    hookgate_flag_atoms_ctx = ctx;
    split = JS_NewCFunction2(ctx, hookgate_regexp_split, "[Symbol.split]", 2,
                             JS_CFUNC_generic, 0);
    if (JS_IsException(split))
        return -1;
    return JS_DefinePropertyValue(ctx, ctx->class_proto[JS_CLASS_REGEXP], JS_ATOM_Symbol_split,
                                  split, JS_PROP_WRITABLE | JS_PROP_CONFIGURABLE);
}

/* Leaves the loaded heap room for a call: doubles the atom and shape hash tables. QuickJS grows
   each when it is half full, rehashing every entry into a new table, and never shrinks it, so a
   snapshot that sat near the limit had every fresh instance's first call grow it again (and call
   QuickJS's malloc functions through its table, a function reference each). Doubled, a call
   would have to make as many atoms or shapes as the whole snapshot holds. And keeps an empty
   arena in every size class (hookgate_keep_arena), so that a fresh instance's call finds one
   wherever the snapshot's arenas are full or nearly, rather than making one through malloc and
   freeing it. Called once, at the end of loading (lib.rs, `load`). */
int hookgate_quickjs_leave_room(JSRuntime *rt)
{
    int i;

    if (JS_ResizeAtomHash(rt, rt->atom_hash_size * 2) < 0 ||
        resize_shape_hash(rt, rt->shape_hash_bits + 1) < 0)
        return -1;
    /* A kept empty arena in every class. */
    for (i = 0; i < JS_ARENA_BLOCK_SIZE_COUNT; i++) {
        JSArena *ar;
        if (hookgate_kept_arena[i] && hookgate_kept_arena[i]->n_used_blocks == 0)
            continue;
        ar = arena_new(rt, i);
        if (!ar)
            return -1;
        list_del(&ar->link);
        list_del(&ar->free_link);
        hookgate_keep_arena(rt, ar);
    }
    /* From here on the runtime lives as long as the instance: shapes can be kept. */
    hookgate_shapes_rt = rt;
    return 0;
}
