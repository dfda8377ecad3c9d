//! Encoded prefixes kept across requests, so follow-up questions about the same state skip
//! the prefill.
//!
//! The key is the exact token ids of the prefix (system turn, state, seam), never the text:
//! two prefixes share an entry only when the model would see the same input. Entries are
//! evicted least recently used first once their total size passes the byte budget; a prefix
//! larger than the whole budget is used once and not kept.
//!
//! Two requests that miss on the same prefix at the same time both encode it and the second
//! insert wins; both get correct, identical answers, only the work is repeated.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lru::LruCache;

/// Counters and occupancy of a prefix cache, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Lookups that found their prefix already encoded.
    pub hits: u64,
    /// Lookups that had to encode their prefix.
    pub misses: u64,
    /// Prefixes held now.
    pub entries: usize,
    /// Bytes the held prefixes take, as the backend measures them.
    pub bytes: usize,
    /// The most bytes the cache may hold (0: the cache is off).
    pub capacity_bytes: usize,
}

/// A byte-bounded LRU of encoded prefixes keyed by their token ids.
#[derive(Debug)]
pub struct PrefixCache<P> {
    capacity_bytes: usize,
    inner: Mutex<Inner<P>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Debug)]
struct Inner<P> {
    entries: LruCache<Vec<u32>, (Arc<P>, usize)>,
    bytes: usize,
}

impl<P> PrefixCache<P> {
    /// A cache holding at most `capacity_bytes` of encoded prefixes (0 turns it off).
    pub fn new(capacity_bytes: usize) -> Self {
        Self {
            capacity_bytes,
            inner: Mutex::new(Inner {
                entries: LruCache::unbounded(),
                bytes: 0,
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The prefix encoded for `tokens`: from the cache, or by `encode` (then kept when it
    /// fits). `size` tells how many bytes an encoded prefix holds. Returns whether it hit.
    pub fn get_or_encode<E>(
        &self,
        tokens: &[u32],
        encode: impl FnOnce() -> Result<P, E>,
        size: impl FnOnce(&P) -> usize,
    ) -> Result<(Arc<P>, bool), E> {
        if self.capacity_bytes == 0 {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return encode().map(|p| (Arc::new(p), false));
        }
        if let Some(found) = self.lock().entries.get(tokens).map(|(p, _)| Arc::clone(p)) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok((found, true));
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        // Encode outside the lock: a prefill takes seconds and other requests must not wait.
        let prefix = Arc::new(encode()?);
        let bytes = size(&prefix);
        if bytes <= self.capacity_bytes {
            let mut inner = self.lock();
            if let Some((_, old)) = inner
                .entries
                .put(tokens.to_vec(), (Arc::clone(&prefix), bytes))
            {
                inner.bytes -= old;
            }
            inner.bytes += bytes;
            while inner.bytes > self.capacity_bytes {
                match inner.entries.pop_lru() {
                    Some((_, (_, evicted))) => inner.bytes -= evicted,
                    None => break,
                }
            }
        }
        Ok((prefix, false))
    }

    pub fn stats(&self) -> PrefixCacheStats {
        let inner = self.lock();
        PrefixCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: inner.entries.len(),
            bytes: inner.bytes,
            capacity_bytes: self.capacity_bytes,
        }
    }

    /// The map stays consistent whatever a panicking holder was doing (every update is a
    /// single put or pop followed by its byte count), so a poisoned lock is taken over.
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<P>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode_counting(calls: &AtomicU64, value: u32) -> Result<u32, ()> {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(value)
    }

    #[test]
    fn a_second_lookup_of_the_same_tokens_hits() {
        let cache = PrefixCache::new(100);
        let calls = AtomicU64::new(0);
        let (a, hit_a) = cache
            .get_or_encode(&[1, 2, 3], || encode_counting(&calls, 7), |_| 10)
            .unwrap();
        let (b, hit_b) = cache
            .get_or_encode(&[1, 2, 3], || encode_counting(&calls, 8), |_| 10)
            .unwrap();
        assert!(!hit_a && hit_b);
        assert_eq!((*a, *b), (7, 7));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let stats = cache.stats();
        assert_eq!(
            (stats.hits, stats.misses, stats.entries, stats.bytes),
            (1, 1, 1, 10)
        );
    }

    #[test]
    fn different_tokens_never_share_an_entry() {
        let cache = PrefixCache::new(100);
        let calls = AtomicU64::new(0);
        cache
            .get_or_encode(&[1, 2], || encode_counting(&calls, 1), |_| 10)
            .unwrap();
        let (b, hit) = cache
            .get_or_encode(&[1, 2, 0], || encode_counting(&calls, 2), |_| 10)
            .unwrap();
        assert!(!hit);
        assert_eq!(*b, 2);
    }

    #[test]
    fn the_least_recently_used_prefix_goes_first_when_over_budget() {
        let cache = PrefixCache::new(30);
        let calls = AtomicU64::new(0);
        for key in [1, 2, 3] {
            cache
                .get_or_encode(&[key], || encode_counting(&calls, key), |_| 10)
                .unwrap();
        }
        // Touch 1 so that 2 is now the least recently used.
        assert!(cache.get_or_encode(&[1], || Err(()), |_| 10).unwrap().1);
        cache
            .get_or_encode(&[4], || encode_counting(&calls, 4), |_| 10)
            .unwrap();
        let stats = cache.stats();
        assert_eq!((stats.entries, stats.bytes), (3, 30));
        assert!(cache.get_or_encode(&[1], || Err(()), |_| 10).unwrap().1);
        assert!(cache.get_or_encode(&[3], || Err(()), |_| 10).unwrap().1);
        assert!(cache.get_or_encode(&[2], || Err(()), |_| 10).is_err());
    }

    #[test]
    fn a_prefix_over_the_whole_budget_is_used_but_not_kept() {
        let cache = PrefixCache::new(30);
        let (p, hit) = cache
            .get_or_encode(&[9], || Ok::<_, ()>(9), |_| 31)
            .unwrap();
        assert!(!hit);
        assert_eq!(*p, 9);
        assert_eq!(cache.stats().entries, 0);
    }

    #[test]
    fn a_zero_budget_turns_the_cache_off() {
        let cache = PrefixCache::new(0);
        for _ in 0..2 {
            assert!(
                !cache
                    .get_or_encode(&[1], || Ok::<_, ()>(1), |_| 1)
                    .unwrap()
                    .1
            );
        }
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.entries), (0, 2, 0));
    }

    #[test]
    fn an_encoding_error_is_returned_and_nothing_is_kept() {
        let cache = PrefixCache::<u32>::new(30);
        assert!(cache.get_or_encode(&[1], || Err("boom"), |_| 1).is_err());
        assert_eq!(cache.stats().entries, 0);
    }
}
