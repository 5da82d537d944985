//! Zeroed arrays of atomic words on transparent huge pages, where the
//! operating system gives them.
//!
//! # The model
//!
//! [`AtomicWords::zeroed`] returns `len` `AtomicU32`s, all 0, resident from
//! the start. An array of at least one huge page (2 MiB) on Linux is an
//! anonymous mapping of its own, one huge page longer than the array, which
//! starts at the first 2 MiB boundary in it, so that each 2 MiB of the
//! array can be one page; the kernel is asked to back it with huge pages
//! (`madvise(MADV_HUGEPAGE)`, what transparent huge pages in `madvise`
//! mode wait for). The array's last, partial 2 MiB is advised too (a whole
//! huge page, resident) where the unused part is at most 1/32 of the
//! array, and left on 4 KiB pages otherwise. Any other array is a boxed
//! slice.
//!
//! Why: a table of 10^7 keys is 183 MB, 45,000 pages of 4 KiB against a
//! TLB of about 2,000 entries, so a random read waits for a page walk as
//! well as for its line, and a prefetch waits for its walk like a load. On
//! 2 MiB pages the same table is 90 entries (`crates/core/BENCHMARKS.md`).
//!
//! # The guarantees
//!
//! - The advice is a hint: where transparent huge pages are `never`, or
//!   memory is too fragmented to assemble one, the array is on 4 KiB pages
//!   and works the same. [`AtomicWords::advised`] says whether the kernel
//!   took the advice, not whether it found huge pages.
//! - A word is written every 4 KiB at build, so that the memory is
//!   resident then and no later access faults a page in; the mapping's
//!   extra huge page is never touched, so it costs address space only.
//! - The memory is freed (unmapped) when the array is dropped.
//!
//! # Safety
//!
//! The crate holds the one `unsafe` block that makes the mapping a slice
//! ([`AtomicWords`]'s `Deref`); tollgate's core forbids `unsafe`. The
//! mapping is never exposed as bytes, so every access to it goes through
//! the atomics' interior mutability.
//!
//! # Example
//!
//! ```
//! use std::sync::atomic::Ordering;
//! use tollgate_pages::AtomicWords;
//!
//! let words = AtomicWords::zeroed(1 << 20).expect("memory");
//! words[12].store(7, Ordering::Relaxed);
//! assert_eq!(words[12].load(Ordering::Relaxed), 7);
//! assert_eq!(words[13].load(Ordering::Relaxed), 0);
//! ```

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicU32, Ordering};

/// A transparent huge page on x86-64 and arm64 with 4 KiB base pages.
pub const HUGE_PAGE: usize = 2 << 20;
/// A base page: the stride at which [`AtomicWords::zeroed`] writes a word.
const PAGE: usize = 4096;
const WORD: usize = size_of::<AtomicU32>();

/// `len` zeroed `AtomicU32`s, on huge pages where the kernel gives them
/// (see the [crate docs](crate)).
pub struct AtomicWords {
    storage: Storage,
    len: usize,
}

enum Storage {
    Boxed(Box<[AtomicU32]>),
    /// The array starts `offset` bytes into `map` (a 2 MiB boundary).
    #[cfg(target_os = "linux")]
    Mapped {
        map: memmap2::MmapRaw,
        offset: usize,
        advised: bool,
    },
}

impl AtomicWords {
    /// `len` words, all 0 and resident, or `None` if the memory is refused.
    pub fn zeroed(len: usize) -> Option<AtomicWords> {
        let bytes = len.checked_mul(WORD)?;
        #[cfg(target_os = "linux")]
        if bytes >= HUGE_PAGE {
            if let Some(words) = AtomicWords::mapped(len, bytes) {
                return Some(words);
            }
        }
        let mut words = Vec::new();
        words.try_reserve_exact(len).ok()?;
        words.extend((0..len).map(|_| AtomicU32::new(0)));
        Some(AtomicWords {
            storage: Storage::Boxed(words.into_boxed_slice()),
            len,
        })
    }

    /// An anonymous mapping one huge page longer than `bytes`, the array
    /// from its first 2 MiB boundary, advised to huge pages.
    #[cfg(target_os = "linux")]
    fn mapped(len: usize, bytes: usize) -> Option<AtomicWords> {
        // The tail past the last 2 MiB boundary is on a huge page of its
        // own where that page's unused part is at most 1/32 of the array.
        let rounded = bytes.checked_next_multiple_of(HUGE_PAGE)?;
        let advised_len = if (rounded - bytes) * 32 <= bytes {
            rounded
        } else {
            bytes
        };
        let map_len = advised_len.checked_add(HUGE_PAGE)?;
        let map: memmap2::MmapRaw = memmap2::MmapOptions::new()
            .len(map_len)
            .map_anon()
            .ok()?
            .into();
        let offset = map.as_ptr().addr().wrapping_neg() % HUGE_PAGE;
        let advised = map
            .advise_range(memmap2::Advice::HugePage, offset, advised_len)
            .is_ok();
        let words = AtomicWords {
            storage: Storage::Mapped {
                map,
                offset,
                advised,
            },
            len,
        };
        // Relaxed: nothing else sees the array yet; the store only makes
        // its page resident (a load would map the shared zero page).
        for word in words.iter().step_by(PAGE / WORD) {
            word.store(0, Ordering::Relaxed);
        }
        Some(words)
    }

    /// Whether the array is a mapping the kernel accepted the huge-page
    /// advice for (false for a boxed slice, or where the kernel refused).
    pub fn advised(&self) -> bool {
        match &self.storage {
            Storage::Boxed(_) => false,
            #[cfg(target_os = "linux")]
            Storage::Mapped { advised, .. } => *advised,
        }
    }
}

impl Deref for AtomicWords {
    type Target = [AtomicU32];

    #[inline(always)]
    fn deref(&self) -> &[AtomicU32] {
        match &self.storage {
            Storage::Boxed(words) => words,
            #[cfg(target_os = "linux")]
            Storage::Mapped { map, offset, .. } => {
                #[allow(unsafe_code)]
                // SAFETY: `offset + len * 4 <= map.len()` (the map is one
                // huge page longer than the array, or than the array
                // rounded up to huge pages, and `offset` is less than one
                // huge page), so the slice lies in one live mapping, owned
                // by `self` and unmapped only when `self` drops, after this
                // borrow ends. Its start is a 2 MiB boundary, aligned for
                // `AtomicU32`. An anonymous mapping is zero-filled, and
                // every bit pattern is a valid `AtomicU32`. The mapping is
                // never exposed otherwise, so all access to it goes through
                // these atomics (interior mutability); `as_mut_ptr` gives a
                // pointer valid for writes.
                unsafe {
                    std::slice::from_raw_parts(map.as_mut_ptr().add(*offset).cast(), self.len)
                }
            }
        }
    }
}

impl fmt::Debug for AtomicWords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AtomicWords")
            .field("len", &self.len)
            .field("advised", &self.advised())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_arrays_are_boxed_and_zeroed() {
        let words = AtomicWords::zeroed(1000).expect("memory");
        assert_eq!(words.len(), 1000);
        assert!(words.iter().all(|w| w.load(Ordering::Relaxed) == 0));
        assert!(!words.advised());
        assert!(AtomicWords::zeroed(0).expect("empty").is_empty());
    }

    #[test]
    fn a_length_past_the_address_space_is_refused() {
        assert!(AtomicWords::zeroed(usize::MAX).is_none());
        assert!(AtomicWords::zeroed(usize::MAX / 4 - 1).is_none());
    }

    #[test]
    fn large_arrays_start_on_a_huge_page_and_hold_what_is_written() {
        let len = 3 * HUGE_PAGE / WORD + 5;
        let words = AtomicWords::zeroed(len).expect("memory");
        assert_eq!(words.len(), len);
        #[cfg(target_os = "linux")]
        assert_eq!(words.as_ptr().addr() % HUGE_PAGE, 0);
        assert!(words.iter().all(|w| w.load(Ordering::Relaxed) == 0));
        for (i, word) in words.iter().enumerate().step_by(997) {
            word.store(i as u32 ^ 0xA5A5_A5A5, Ordering::Relaxed);
        }
        words[len - 1].store(42, Ordering::Relaxed);
        for (i, word) in words.iter().enumerate() {
            let want = if i == len - 1 {
                42
            } else if i % 997 == 0 {
                i as u32 ^ 0xA5A5_A5A5
            } else {
                0
            };
            assert_eq!(word.load(Ordering::Relaxed), want, "word {i}");
        }
    }

    /// The kernel marks a range advised `MADV_HUGEPAGE` with `hg` in its
    /// `VmFlags` (`/proc/self/smaps`), whatever pages it then finds.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_arrays_are_advised_to_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            eprintln!("this kernel has no transparent huge pages: nothing to advise");
            return;
        }
        let words = AtomicWords::zeroed(4 * HUGE_PAGE / WORD).expect("memory");
        assert!(words.advised(), "madvise(MADV_HUGEPAGE) refused");
        let start = words.as_ptr().addr();
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let mut in_range = false;
        let mut flags = None;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((from, to)) = range.split_once('-') {
                    if let (Ok(from), Ok(to)) = (
                        usize::from_str_radix(from, 16),
                        usize::from_str_radix(to, 16),
                    ) {
                        in_range = from <= start && start < to;
                        continue;
                    }
                }
            }
            if in_range {
                if let Some(vm_flags) = line.strip_prefix("VmFlags:") {
                    flags = Some(vm_flags.to_owned());
                }
            }
        }
        let flags = flags.expect("the array's mapping in /proc/self/smaps");
        assert!(
            flags.split_whitespace().any(|flag| flag == "hg"),
            "VmFlags:{flags}"
        );
    }
}
