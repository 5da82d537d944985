//! Redis's own strings and keys, through the raw module API: a command's
//! arguments read in place, and key handles closed on drop.
//!
//! # Decisions (why not the SDK's wrappers here)
//!
//! A decision is a few hundred instructions of arithmetic inside a command
//! envelope that Redis charges several thousand for; the SDK's wrappers
//! add to the envelope on every call. Profiled with callgrind (the server
//! with the module, `redis-benchmark -P 16`, instructions per decision,
//! see `BENCHMARKS.md`): wrapping the arguments (`decode_args`: a `Vec` and
//! a `RedisModule_RetainString`/`FreeString` pair per argument) cost about
//! 1,900 instructions of a decision, and the SDK's read (`RedisKey::read`
//! copied into a `Vec` by the store) one allocation more. Here the
//! arguments are borrowed as Redis passed them, and a key's string is read
//! in place while its handle is open.
//!
//! # Safety
//!
//! Each `unsafe` block says why it is sound; all run on Redis's main thread
//! inside a command's call, with that call's context.

use std::ffi::c_int;
use std::ptr::NonNull;

use redis_module::raw;

/// A command's argument, as Redis passed it: valid for the command's call.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct Arg(pub(crate) *mut raw::RedisModuleString);

impl Arg {
    /// The arguments of a command call.
    ///
    /// # Safety
    ///
    /// `argv` and `argc` are the ones Redis passed to the command's
    /// function, and the slice is used only during that call.
    pub(crate) unsafe fn all<'a>(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> &'a [Arg] {
        let len = usize::try_from(argc).unwrap_or(0);
        if argv.is_null() || len == 0 {
            return &[];
        }
        // SAFETY: Redis passes `argc` valid string pointers in `argv`, alive
        // for the call (the caller's contract); `Arg` is a transparent-size
        // wrapper of one pointer (`repr(transparent)` below).
        unsafe { std::slice::from_raw_parts(argv.cast::<Arg>(), len) }
    }

    /// The argument's bytes.
    pub(crate) fn bytes<'a>(self) -> &'a [u8] {
        let mut len = 0;
        let ptr = raw::string_ptr_len(self.0, &mut len);
        if ptr.is_null() || len == 0 {
            return &[];
        }
        // SAFETY: `RedisModule_StringPtrLen` returned the string's own
        // buffer of `len` bytes; the argument is not modified or freed
        // before the command returns, and no borrow outlives the command.
        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
    }
}

/// The parser reads the arguments where they are (see [`crate::args`]).
impl AsRef<[u8]> for Arg {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

// `Arg::all` reinterprets Redis's `RedisModuleString **` as `&[Arg]`.
const _: () =
    assert!(std::mem::size_of::<Arg>() == std::mem::size_of::<*mut raw::RedisModuleString>());

/// A key opened for reading, closed on drop.
pub(crate) struct ReadKey(NonNull<raw::RedisModuleKey>);

/// What an existing key holds, as a decision reads it.
pub(crate) enum Held<'a> {
    /// A string, read in place.
    String(&'a [u8]),
    /// Another type.
    Other,
}

impl ReadKey {
    /// Opens `key` for reading; `None` if it does not exist.
    pub(crate) fn open(ctx: *mut raw::RedisModuleCtx, key: Arg) -> Option<ReadKey> {
        NonNull::new(raw::open_key(ctx, key.0, raw::KeyMode::READ)).map(ReadKey)
    }

    /// The key's string, borrowed while the handle is open.
    pub(crate) fn held(&self) -> Held<'_> {
        let mut len = 0;
        // READ: a raw string is read in place; Redis decodes an encoded one
        // (an integer `SET` by a script) into a raw string once.
        let ptr = raw::string_dma(self.0.as_ptr(), &mut len, raw::KeyMode::READ);
        if ptr.is_null() {
            return Held::Other;
        }
        if len == 0 {
            return Held::String(&[]);
        }
        // SAFETY: `RedisModule_StringDMA` returned the key's own string of
        // `len` bytes; it stays valid until the key is modified or closed,
        // which needs the handle, borrowed by the slice.
        Held::String(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    }
}

impl Drop for ReadKey {
    fn drop(&mut self) {
        raw::close_key(self.0.as_ptr());
    }
}

/// A key opened for writing through the raw API, closed on drop.
pub(crate) struct WriteKey(NonNull<raw::RedisModuleKey>);

impl WriteKey {
    pub(crate) fn open(ctx: *mut raw::RedisModuleCtx, key: Arg) -> Option<WriteKey> {
        let mode = raw::KeyMode::READ | raw::KeyMode::WRITE;
        NonNull::new(raw::open_key(ctx, key.0, mode)).map(WriteKey)
    }

    pub(crate) fn raw(&self) -> *mut raw::RedisModuleKey {
        self.0.as_ptr()
    }

    /// The string's DMA buffer for writing; `None` for another type.
    pub(crate) fn buffer(&mut self) -> Option<&mut [u8]> {
        let mut len = 0;
        let ptr = raw::string_dma(self.raw(), &mut len, raw::KeyMode::WRITE);
        if ptr.is_null() {
            return None;
        }
        if len == 0 {
            // An empty key's buffer is a read-only literal: never written.
            return Some(&mut []);
        }
        // SAFETY: `RedisModule_StringDMA` returned a non-null pointer to the
        // key's own string of `len` bytes, unshared for writing (mode
        // WRITE); it stays valid until the key is modified or closed, which
        // needs `&mut self` or `self`: the borrow of the slice prevents both.
        Some(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) })
    }

    pub(crate) fn delete(&self) {
        if let Some(delete) = {
            // SAFETY: a plain read (a copy) of the function pointer that
            // `RedisModule_Init` filled in when the module was loaded.
            unsafe { raw::RedisModule_DeleteKey }
        } {
            // SAFETY: `self` is an open key handle, opened for writing.
            unsafe { delete(self.raw()) };
        }
    }
}

impl Drop for WriteKey {
    fn drop(&mut self) {
        raw::close_key(self.raw());
    }
}
