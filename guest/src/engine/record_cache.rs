//! The rounds this instance decoded or wrote lately, each kept with the document text it came
//! from: reading the same document again (a kit polling its pending round, a listing shown
//! again, the next operation on a round this instance just wrote) clones the record instead of
//! decoding the document.
//!
//! A hit is decided by the whole text, byte for byte, never by a version number: whatever
//! happened to the database in between (another process, a restored backup, a hand edit), the
//! record returned is exactly what decoding that text gives. The cache is bounded in bytes, so
//! it never takes an instance near its memory limit.

use crate::m3::managed_input::types::ManagedInputRecord;
use std::cell::RefCell;
use std::collections::HashMap;

/// Most bytes of document text kept (the records decoded from them take about as much again).
const CAPACITY_BYTES: usize = 1 << 20;

/// A longer document is never kept (a round with a large answer is read rarely, and would
/// crowd out the others).
const LARGEST_KEPT: usize = 64 << 10;

struct Kept {
    document: String,
    record: ManagedInputRecord,
}

struct RecordCache {
    rounds: HashMap<String, Kept, foldhash::fast::FixedState>,
    bytes: usize,
}

fn new_cache() -> RecordCache {
    let mut seed = [0u8; 8];
    // Without randomness the seed is fixed; correctness never depends on it.
    let _ = getrandom::fill(&mut seed);
    RecordCache {
        rounds: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(u64::from_le_bytes(
            seed,
        ))),
        bytes: 0,
    }
}

thread_local! {
    static CACHE: RefCell<RecordCache> = RefCell::new(new_cache());
}

/// The record decoded from `document` for `round_id`, if this instance keeps it.
pub fn get(round_id: &str, document: &str) -> Option<ManagedInputRecord> {
    CACHE.with(|cache| {
        let cache = cache.borrow();
        let kept = cache.rounds.get(round_id)?;
        same_text(&kept.document, document).then(|| kept.record.clone())
    })
}

/// Whether `a` and `b` are the same bytes, compared eight at a time (the component's own
/// `memcmp` compares one byte per step, which made a hit cost a good part of a decode).
fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let (a_words, b_words) = (a.chunks_exact(8), b.chunks_exact(8));
    let (a_rest, b_rest) = (a_words.remainder(), b_words.remainder());
    a_words.zip(b_words).all(|(x, y)| {
        u64::from_ne_bytes(x.try_into().unwrap_or_default())
            == u64::from_ne_bytes(y.try_into().unwrap_or_default())
    }) && a_rest == b_rest
}

/// Keeps `record` as what `document` of `round_id` decodes to (replacing what was kept for
/// it). The caller guarantees that decoding `document` gives exactly `record`.
pub fn keep(round_id: &str, document: &str, record: &ManagedInputRecord) {
    if document.len() > LARGEST_KEPT {
        forget(round_id);
        return;
    }
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        let kept_before = cache.rounds.get(round_id).map_or(0, |k| k.document.len());
        cache.bytes -= kept_before;
        if cache.bytes + document.len() > CAPACITY_BYTES {
            cache.rounds.clear();
            cache.bytes = 0;
        }
        cache.bytes += document.len();
        cache.rounds.insert(
            round_id.to_string(),
            Kept {
                document: document.to_string(),
                record: record.clone(),
            },
        );
    });
}

/// Drops what is kept for `round_id`.
pub fn forget(round_id: &str) {
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(kept) = cache.rounds.remove(round_id) {
            cache.bytes -= kept.document.len();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(round_id: &str) -> ManagedInputRecord {
        let mut record = crate::stored::tests::record();
        record.pending.round_id = round_id.into();
        record
    }

    #[test]
    fn a_record_is_returned_only_for_the_same_text_of_the_same_round() {
        keep("r1", "{\"a\":1}", &record("r1"));
        assert_eq!(get("r1", "{\"a\":1}"), Some(record("r1")));
        assert_eq!(
            get("r1", "{\"a\":2}"),
            None,
            "another text is decoded again"
        );
        assert_eq!(
            get("r2", "{\"a\":1}"),
            None,
            "another round is not this one"
        );
        keep("r1", "{\"a\":2}", &record("r1"));
        assert_eq!(get("r1", "{\"a\":1}"), None, "the older text is replaced");
        forget("r1");
        assert_eq!(get("r1", "{\"a\":2}"), None);
    }

    #[test]
    fn texts_are_the_same_only_when_every_byte_is() {
        let text = "{\"round\":\"r1\",\"answer\":\"0123456789abcdef\"}";
        assert!(same_text(text, &String::from(text)));
        assert!(same_text("", ""));
        for at in 0..text.len() {
            let mut other = text.as_bytes().to_vec();
            other[at] ^= 1;
            let other = String::from_utf8(other).unwrap();
            assert!(!same_text(text, &other), "byte {at} differs");
        }
        assert!(!same_text(text, &text[..text.len() - 1]));
    }

    #[test]
    fn the_cache_stays_within_its_bytes_and_skips_large_documents() {
        let large = "x".repeat(LARGEST_KEPT + 1);
        keep("big", &large, &record("big"));
        assert_eq!(get("big", &large), None);
        let text = "y".repeat(LARGEST_KEPT);
        let rounds = CAPACITY_BYTES / LARGEST_KEPT + 3;
        for i in 0..rounds {
            keep(&format!("r{i}"), &text, &record(&format!("r{i}")));
            let bytes = CACHE.with(|c| c.borrow().bytes);
            assert!(bytes <= CAPACITY_BYTES, "{bytes} bytes kept");
        }
        let kept = CACHE.with(|c| c.borrow().rounds.len());
        assert!(
            kept < rounds,
            "{kept} of {rounds} kept: the cache was never emptied"
        );
        assert_eq!(
            get(&format!("r{}", rounds - 1), &text),
            Some(record(&format!("r{}", rounds - 1)))
        );
    }
}
