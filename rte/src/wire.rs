//! PMI wire formats, without I/O.
//!
//! Two framings exist and a single connection may use both (a PMI-2 client says
//! `cmd=init pmi_version=2` in PMI-1 framing, then switches):
//!
//! * **v1**: one line, `cmd=<name> key=value key=value\n`. Values end at a space or newline;
//!   a backslash escapes the next character (MPICH's `simple_pmi` convention).
//! * **v2**: a 6-character decimal length (space padded), then `cmd=<name>;key=value;...;`.
//!
//! [`Message`] is a borrowed view of one parsed message (keys and unescaped values point into
//! the input where possible); [`Framer`] cuts a byte stream into messages and never panics on
//! hostile input: anything malformed is an error the caller counts and drops.

use std::borrow::Cow;

/// Longest message we accept, in bytes. MPICH's own limit is 64 KiB for v2 commands.
pub const MAX_MESSAGE_LEN: usize = 64 * 1024;

/// Which framing a message uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireVersion {
    /// PMI-1 text line.
    V1,
    /// PMI-2 length-prefixed command.
    V2,
}

/// Why a message could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The message does not start with `cmd=`.
    #[error("message does not start with cmd=")]
    MissingCmd,
    /// A key contains a character other than `[A-Za-z0-9_/-]`.
    #[error("invalid character {0:?} in a key")]
    BadKey(char),
    /// `key=` with nothing after the `=`.
    #[error("empty value for key {0:?}")]
    EmptyValue(String),
    /// The message is longer than [`MAX_MESSAGE_LEN`].
    #[error("message of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Length seen so far.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The 6-character length of a v2 message is not a number.
    #[error("bad PMI-2 length prefix {0:?}")]
    BadLength(String),
    /// The message is not UTF-8.
    #[error("message is not UTF-8")]
    NotUtf8,
}

/// One parsed PMI message: the command name and its attributes in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<'a> {
    /// Command name (`init`, `get_result`, `kvs-fence`, ...).
    pub cmd: Cow<'a, str>,
    /// Attributes in wire order; a bare key (no `=`) has value `None`.
    pub attrs: Vec<(&'a str, Option<Cow<'a, str>>)>,
}

impl<'a> Message<'a> {
    /// Value of the first attribute named `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Value of `key` parsed as an integer.
    pub fn get_int(&self, key: &str) -> Option<i64> {
        self.get(key).and_then(|v| v.trim().parse().ok())
    }

    /// The server's return code (`rc`), 0 when absent.
    pub fn rc(&self) -> i64 {
        self.get_int("rc").unwrap_or(0)
    }

    /// Copy into an owned message.
    pub fn into_owned(self) -> OwnedMessage {
        OwnedMessage {
            cmd: self.cmd.into_owned(),
            attrs: self
                .attrs
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.map(Cow::into_owned)))
                .collect(),
        }
    }
}

/// An owned PMI message (for building replies and for queues).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnedMessage {
    /// Command name.
    pub cmd: String,
    /// Attributes in order.
    pub attrs: Vec<(String, Option<String>)>,
}

impl OwnedMessage {
    /// A message with no attributes.
    pub fn new(cmd: &str) -> Self {
        Self {
            cmd: cmd.to_string(),
            attrs: Vec::new(),
        }
    }

    /// Append `key=value`.
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        self.attrs.push((key.to_string(), Some(value.to_string())));
        self
    }

    /// Value of the first attribute named `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Serialize in the given framing.
    pub fn encode(&self, version: WireVersion) -> Vec<u8> {
        match version {
            WireVersion::V1 => {
                let mut s = String::with_capacity(64);
                s.push_str("cmd=");
                s.push_str(&self.cmd);
                for (k, v) in &self.attrs {
                    s.push(' ');
                    s.push_str(k);
                    if let Some(v) = v {
                        s.push('=');
                        escape_v1_into(v, &mut s);
                    }
                }
                s.push('\n');
                s.into_bytes()
            }
            WireVersion::V2 => {
                let mut body = String::with_capacity(64);
                body.push_str("cmd=");
                body.push_str(&self.cmd);
                body.push(';');
                for (k, v) in &self.attrs {
                    body.push_str(k);
                    if let Some(v) = v {
                        body.push('=');
                        // v2 has no escapes; a ';' inside a value cannot be represented, and
                        // callers only send hex, numbers and names.
                        body.push_str(v);
                    }
                    body.push(';');
                }
                let mut out = format!("{:6}", body.len()).into_bytes();
                out.extend_from_slice(body.as_bytes());
                out
            }
        }
    }
}

fn escape_v1_into(v: &str, out: &mut String) {
    for c in v.chars() {
        if matches!(c, ' ' | '\\' | '\n') {
            out.push('\\');
        }
        out.push(c);
    }
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/')
}

fn unescape(v: &str) -> Cow<'_, str> {
    if !v.contains('\\') {
        return Cow::Borrowed(v);
    }
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Parse one v1 line (with or without its trailing newline).
pub fn parse_v1(line: &str) -> Result<Message<'_>, WireError> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    if !line.starts_with("cmd=") {
        return Err(WireError::MissingCmd);
    }
    let bytes = line.as_bytes();
    let mut i = 0;
    let mut cmd = None;
    let mut attrs = Vec::new();
    loop {
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        if i >= bytes.len() {
            break;
        }
        let kstart = i;
        while i < bytes.len() && is_key_char(bytes[i] as char) {
            i += 1;
        }
        if i == kstart || (i < bytes.len() && bytes[i] != b'=' && bytes[i] != b' ') {
            let bad = line[i..].chars().next().unwrap_or(' ');
            return Err(WireError::BadKey(bad));
        }
        let key = &line[kstart..i];
        let mut val = None;
        if i < bytes.len() && bytes[i] == b'=' {
            i += 1;
            let vstart = i;
            while i < bytes.len() && bytes[i] != b' ' {
                // A backslash protects the next byte, including a space.
                if bytes[i] == b'\\' && i + 1 < bytes.len() {
                    i += 2;
                } else {
                    i += 1;
                }
            }
            let i_end = i.min(bytes.len());
            if i_end == vstart {
                return Err(WireError::EmptyValue(key.to_string()));
            }
            // Escapes are ASCII, so vstart..i_end lies on char boundaries unless the value
            // ends inside a multi-byte char, which cannot happen: we only stop at ' ' or end.
            val = Some(unescape(&line[vstart..i_end]));
        }
        if key == "cmd" && cmd.is_none() {
            cmd = val;
        } else {
            attrs.push((key, val));
        }
    }
    let cmd = cmd.ok_or(WireError::MissingCmd)?;
    Ok(Message { cmd, attrs })
}

/// Parse the body of one v2 message (without its 6-character length prefix).
pub fn parse_v2(body: &str) -> Result<Message<'_>, WireError> {
    if !body.starts_with("cmd=") {
        return Err(WireError::MissingCmd);
    }
    let mut cmd = None;
    let mut attrs = Vec::new();
    for field in body.split(';') {
        let field = field.trim_start_matches(' ');
        if field.is_empty() {
            continue;
        }
        let (key, val) = match field.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (field, None),
        };
        if let Some(bad) = key.chars().find(|c| !is_key_char(*c)) {
            return Err(WireError::BadKey(bad));
        }
        if key.is_empty() {
            return Err(WireError::BadKey('='));
        }
        if val == Some("") {
            return Err(WireError::EmptyValue(key.to_string()));
        }
        if key == "cmd" && cmd.is_none() {
            cmd = val.map(Cow::Borrowed);
        } else {
            attrs.push((key, val.map(Cow::Borrowed)));
        }
    }
    let cmd = cmd.ok_or(WireError::MissingCmd)?;
    Ok(Message { cmd, attrs })
}

/// One complete frame cut from a byte stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The framing it arrived in.
    pub version: WireVersion,
    /// The message text: a v1 line without its newline, or a v2 body without its length.
    pub text: String,
}

impl Frame {
    /// Parse the frame's text.
    pub fn parse(&self) -> Result<Message<'_>, WireError> {
        match self.version {
            WireVersion::V1 => parse_v1(&self.text),
            WireVersion::V2 => parse_v2(&self.text),
        }
    }
}

/// Cuts a byte stream into frames, detecting the framing per message as MPICH does
/// (`cmd=` starts a v1 line, anything else must be a v2 length).
#[derive(Debug, Default)]
pub struct Framer {
    buf: Vec<u8>,
    /// Bytes already scanned for a newline (avoids quadratic rescans of long lines).
    scanned: usize,
}

impl Framer {
    /// An empty framer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append received bytes.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes buffered but not yet returned as frames.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame, `None` if more bytes are needed. After an error the buffer is
    /// cleared: a stream that broke framing cannot be resynchronised reliably.
    pub fn next_frame(&mut self) -> Option<Result<Frame, WireError>> {
        let r = self.try_next();
        if let Some(Err(_)) = r {
            self.buf.clear();
            self.scanned = 0;
        }
        r
    }

    fn try_next(&mut self) -> Option<Result<Frame, WireError>> {
        if self.buf.is_empty() {
            return None;
        }
        let looks_v1 = {
            let n4 = self.buf.len().min(4);
            let n5 = self.buf.len().min(5);
            b"cmd="[..n4] == self.buf[..n4] || b"mcmd="[..n5] == self.buf[..n5]
        };
        if looks_v1 {
            let start = self.scanned;
            if let Some(pos) = self.buf[start..].iter().position(|&b| b == b'\n') {
                let end = start + pos;
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                self.scanned = 0;
                return Some(
                    String::from_utf8(line[..line.len() - 1].to_vec())
                        .map(|text| Frame {
                            version: WireVersion::V1,
                            text,
                        })
                        .map_err(|_| WireError::NotUtf8),
                );
            }
            self.scanned = self.buf.len();
            if self.buf.len() > MAX_MESSAGE_LEN {
                return Some(Err(WireError::TooLong {
                    len: self.buf.len(),
                    max: MAX_MESSAGE_LEN,
                }));
            }
            return None;
        }
        if self.buf.len() < 6 {
            // A short prefix that is neither v1 nor a number is already hopeless.
            if !self.buf.iter().all(|b| b.is_ascii_digit() || *b == b' ') {
                return Some(Err(WireError::BadLength(
                    String::from_utf8_lossy(&self.buf).into_owned(),
                )));
            }
            return None;
        }
        let prefix = String::from_utf8_lossy(&self.buf[..6]).into_owned();
        let len: usize = match prefix.trim().parse() {
            Ok(l) => l,
            Err(_) => return Some(Err(WireError::BadLength(prefix))),
        };
        if len > MAX_MESSAGE_LEN {
            return Some(Err(WireError::TooLong {
                len,
                max: MAX_MESSAGE_LEN,
            }));
        }
        if self.buf.len() < 6 + len {
            return None;
        }
        let body: Vec<u8> = self.buf.drain(..6 + len).skip(6).collect();
        self.scanned = 0;
        Some(
            String::from_utf8(body)
                .map(|text| Frame {
                    version: WireVersion::V2,
                    text,
                })
                .map_err(|_| WireError::NotUtf8),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_hydra_get_result() {
        let m = parse_v1("cmd=get_result rc=0 msg=success value=abcd\n").unwrap();
        assert_eq!(m.cmd, "get_result");
        assert_eq!(m.rc(), 0);
        assert_eq!(m.get("value"), Some("abcd"));
        assert_eq!(m.get("msg"), Some("success"));
    }

    #[test]
    fn v1_escapes_round_trip() {
        let m = OwnedMessage::new("abort").with("message", "a b\\c");
        let bytes = m.encode(WireVersion::V1);
        assert_eq!(bytes, b"cmd=abort message=a\\ b\\\\c\n");
        let text = std::str::from_utf8(&bytes).unwrap();
        assert_eq!(parse_v1(text).unwrap().get("message"), Some("a b\\c"));
    }

    #[test]
    fn v2_encoding_matches_mpich() {
        let m = OwnedMessage::new("fullinit")
            .with("pmirank", 3)
            .with("threaded", "FALSE");
        let bytes = m.encode(WireVersion::V2);
        let s = std::str::from_utf8(&bytes).unwrap();
        assert_eq!(s, "    38cmd=fullinit;pmirank=3;threaded=FALSE;");
        let mut f = Framer::new();
        f.push(&bytes);
        let fr = f.next_frame().unwrap().unwrap();
        assert_eq!(fr.version, WireVersion::V2);
        assert_eq!(fr.parse().unwrap().get_int("pmirank"), Some(3));
    }

    #[test]
    fn framer_splits_mixed_stream_and_waits_for_more() {
        let mut f = Framer::new();
        let a = OwnedMessage::new("init").with("pmi_version", 2);
        let b = OwnedMessage::new("kvs-fence");
        let mut all = a.encode(WireVersion::V1);
        all.extend(b.encode(WireVersion::V2));
        for (i, byte) in all.iter().enumerate() {
            f.push(std::slice::from_ref(byte));
            if i + 1 < a.encode(WireVersion::V1).len() {
                assert!(f.next_frame().is_none());
            }
        }
        let mut got = Vec::new();
        while let Some(fr) = f.next_frame() {
            got.push(fr.unwrap());
        }
        // The first frame was already returned inside the loop above only if polled; here
        // everything was pushed before the final polls.
        assert!(!got.is_empty());
        assert_eq!(got.last().unwrap().parse().unwrap().cmd, "kvs-fence");
    }

    #[test]
    fn malformed_inputs_are_errors() {
        assert_eq!(parse_v1("hello"), Err(WireError::MissingCmd));
        assert!(matches!(
            parse_v1("cmd=put k%y=3"),
            Err(WireError::BadKey('%'))
        ));
        assert!(matches!(
            parse_v1("cmd=put key="),
            Err(WireError::EmptyValue(_))
        ));
        let mut f = Framer::new();
        f.push(b"xx");
        assert!(matches!(f.next_frame(), Some(Err(WireError::BadLength(_)))));
        assert_eq!(f.pending(), 0);
        f.push(b"999999cmd=x;");
        assert!(matches!(
            f.next_frame(),
            Some(Err(WireError::TooLong { .. }))
        ));
    }

    #[test]
    fn overlong_v1_line_is_rejected() {
        let mut f = Framer::new();
        f.push(b"cmd=put value=");
        f.push(&vec![b'a'; MAX_MESSAGE_LEN + 10]);
        assert!(matches!(
            f.next_frame(),
            Some(Err(WireError::TooLong { .. }))
        ));
    }

    fn token() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_/-]{1,12}"
    }

    proptest! {
        #[test]
        fn framer_never_panics(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16)) {
            let mut f = Framer::new();
            for c in chunks {
                f.push(&c);
                while let Some(r) = f.next_frame() {
                    if let Ok(fr) = r { let _ = fr.parse(); }
                }
            }
        }

        #[test]
        fn round_trip_both_wires(cmd in "[a-z_-]{1,12}",
                                 attrs in proptest::collection::vec((token(), "[ -~]{1,20}"), 0..6),
                                 split in 0usize..200) {
            for version in [WireVersion::V1, WireVersion::V2] {
                let attrs: Vec<(String, String)> = attrs.iter()
                    .filter(|(k, _)| k != "cmd")
                    .map(|(k, v)| (k.clone(), if version == WireVersion::V2 { v.replace(';', ":") } else { v.clone() }))
                    .collect();
                let mut m = OwnedMessage::new(&cmd);
                for (k, v) in &attrs { m = m.with(k, v); }
                let bytes = m.encode(version);
                let mut f = Framer::new();
                let cut = split.min(bytes.len());
                f.push(&bytes[..cut]);
                let first = f.next_frame();
                f.push(&bytes[cut..]);
                let fr = match first { Some(r) => r.unwrap(), None => f.next_frame().unwrap().unwrap() };
                let parsed = fr.parse().unwrap().into_owned();
                prop_assert_eq!(parsed.cmd, cmd.clone());
                prop_assert_eq!(parsed.attrs.len(), attrs.len());
                for ((k, v), (pk, pv)) in attrs.iter().zip(parsed.attrs.iter()) {
                    prop_assert_eq!(k, pk);
                    prop_assert_eq!(Some(v.clone()), pv.clone());
                }
            }
        }
    }
}
