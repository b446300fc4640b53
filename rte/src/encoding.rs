//! Binary-safe modex values over the text KVS: hex, chunked to the server's value limit.
//!
//! A value `v` published under wire key `K` is stored as
//! `K = "<n>:<hex chunk 0>"` and `K#i = "<hex chunk i>"` for `i` in `1..n`.
//! Hex (not base64) because PMI-1 servers differ in how they treat `=`, `/` and `+` in values.

use std::fmt::Write as _;

/// Why a stored value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The first chunk has no `<n>:` header.
    #[error("missing chunk-count header")]
    MissingHeader,
    /// The chunk count is not a positive number or is absurdly large.
    #[error("bad chunk count {0:?}")]
    BadCount(String),
    /// A chunk is not valid hex.
    #[error("invalid hex in chunk {0}")]
    BadHex(usize),
}

/// Chunk counts above this are treated as corruption (64 MiB of card at 1 KiB values).
pub const MAX_CHUNKS: usize = 65_536;

/// Hex-encode `data`.
pub fn hex_encode(data: &[u8]) -> String {
    let mut s = String::with_capacity(data.len() * 2);
    for b in data {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Decode lowercase or uppercase hex; `None` on odd length or a non-hex character.
pub fn hex_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    let nib = |c: u8| -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    };
    b.chunks(2)
        .map(|p| Some(nib(p[0])? << 4 | nib(p[1])?))
        .collect()
}

/// Split `data` into the wire values for `base_key`, each at most `max_value_len` characters.
/// Returns `(key, value)` pairs, the head first.
pub fn encode_chunks(base_key: &str, data: &[u8], max_value_len: usize) -> Vec<(String, String)> {
    let hex = hex_encode(data);
    // Room for the "<n>:" header on the head chunk: at most 6 digits and a colon.
    let room = max_value_len.saturating_sub(8).max(2) & !1;
    let pieces: Vec<&str> = if hex.is_empty() {
        vec![""]
    } else {
        hex.as_bytes()
            .chunks(room)
            // Hex is ASCII, so any byte split is a char boundary.
            .map(|c| std::str::from_utf8(c).unwrap_or_default())
            .collect()
    };
    let n = pieces.len();
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            if i == 0 {
                (base_key.to_string(), format!("{n}:{p}"))
            } else {
                (chunk_key(base_key, i), p.to_string())
            }
        })
        .collect()
}

/// The wire key of chunk `i` (`i >= 1`) of `base_key`.
pub fn chunk_key(base_key: &str, i: usize) -> String {
    format!("{base_key}#{i}")
}

/// Parse the head chunk: the chunk count and the first piece of hex.
pub fn parse_head(head: &str) -> Result<(usize, &str), DecodeError> {
    let (n, rest) = head.split_once(':').ok_or(DecodeError::MissingHeader)?;
    let count: usize = n
        .parse()
        .map_err(|_| DecodeError::BadCount(n.to_string()))?;
    if count == 0 || count > MAX_CHUNKS {
        return Err(DecodeError::BadCount(n.to_string()));
    }
    Ok((count, rest))
}

/// Join the hex chunks (head payload first) and decode them.
pub fn decode_chunks<S: AsRef<str>>(chunks: &[S]) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        out.extend(hex_decode(c.as_ref()).ok_or(DecodeError::BadHex(i))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_value_is_one_chunk() {
        let c = encode_chunks("k", &[], 64);
        assert_eq!(c, vec![("k".to_string(), "1:".to_string())]);
        let (n, p) = parse_head(&c[0].1).unwrap();
        assert_eq!(n, 1);
        assert_eq!(decode_chunks(&[p]).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn corrupt_values_are_errors() {
        assert_eq!(parse_head("abc"), Err(DecodeError::MissingHeader));
        assert!(matches!(parse_head("0:"), Err(DecodeError::BadCount(_))));
        assert!(matches!(parse_head("x:"), Err(DecodeError::BadCount(_))));
        assert_eq!(decode_chunks(&["0g"]), Err(DecodeError::BadHex(0)));
        assert_eq!(decode_chunks(&["abc"]), Err(DecodeError::BadHex(0)));
    }

    proptest! {
        #[test]
        fn chunks_round_trip_and_respect_limit(data in proptest::collection::vec(any::<u8>(), 0..3000),
                                               limit in 16usize..1100) {
            let c = encode_chunks("btl.shm", &data, limit);
            for (_, v) in &c { prop_assert!(v.len() <= limit); }
            let (n, head) = parse_head(&c[0].1).unwrap();
            prop_assert_eq!(n, c.len());
            let mut parts = vec![head.to_string()];
            for (i, (k, v)) in c.iter().enumerate().skip(1) {
                prop_assert_eq!(k.clone(), chunk_key("btl.shm", i));
                parts.push(v.clone());
            }
            prop_assert_eq!(decode_chunks(&parts).unwrap(), data);
        }
    }
}
