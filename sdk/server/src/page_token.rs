//! `ListEffects` page tokens: the last key of the page just served, so the next page starts
//! strictly after it in the journal's key order. A key appended between calls shifts no page, as
//! an offset would. A reader's token is the key in hex: it may see every key anyway. A worker's
//! page lists only its own effects, but resumes after the last key it scanned, which may be
//! another caller's: its token is that key sealed (ChaCha20-Poly1305, under a key this server
//! process drew at start), so the token tells it nothing. One this server did not give is
//! refused rather than guessed at.

use interlock::EffectKey;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

/// Names a sealed token's layout.
const SEALED: &str = "s1.";

/// What a sealed key is padded to: its length's byte, then the longest key there may be.
const PADDED: usize = 1 + interlock::effect::MAX_KEY_LEN;

/// Seals the keys a worker's page token carries.
pub(crate) struct Sealer {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl Sealer {
    /// A sealer under a key drawn now; `None` if the system cannot give randomness.
    pub(crate) fn new() -> Option<Self> {
        let rng = SystemRandom::new();
        let mut bytes = [0u8; 32];
        rng.fill(&mut bytes).ok()?;
        let key = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &bytes).ok()?);
        Some(Self { key, rng })
    }

    /// The sealed token that resumes after `key`; `None` if no nonce could be drawn. Every
    /// sealed token is as long as every other: the key is padded to the longest a key may be.
    pub(crate) fn seal(&self, key: &str) -> Option<String> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let len = u8::try_from(key.len()).ok()?;
        let mut data = Vec::with_capacity(PADDED);
        data.push(len);
        data.extend_from_slice(key.as_bytes());
        data.resize(PADDED, 0);
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut data)
            .ok()?;
        let mut out = String::from(SEALED);
        for b in nonce.iter().chain(&data) {
            out.push(hex_digit(b >> 4));
            out.push(hex_digit(b & 0xf));
        }
        Some(out)
    }

    /// The key a sealed token resumes after; `None` when it is not one sealed here. A plain
    /// token is refused: a caller that may not read every key must not choose where a page
    /// starts, or it could tell, page by page, where other callers' keys lie.
    pub(crate) fn open(&self, token: &str) -> Option<EffectKey> {
        let hex = token.strip_prefix(SEALED)?;
        let mut bytes = unhex(hex.as_bytes())?;
        if bytes.len() < NONCE_LEN {
            return None;
        }
        let nonce = Nonce::try_assume_unique_for_key(bytes.get(..NONCE_LEN)?).ok()?;
        let sealed = bytes.get_mut(NONCE_LEN..)?;
        let plain = self.key.open_in_place(nonce, Aad::empty(), sealed).ok()?;
        let (len, rest) = plain.split_first()?;
        let key = rest.get(..usize::from(*len))?;
        EffectKey::fixed(String::from_utf8(key.to_vec()).ok()?).ok()
    }

    /// The key a token resumes after: sealed, or (for a caller that reads every key) plain.
    pub(crate) fn open_any(&self, token: &str) -> Option<EffectKey> {
        match token.strip_prefix(SEALED) {
            Some(_) => self.open(token),
            None => decode(token),
        }
    }
}

/// Names the token's layout, so another can follow without misreading this one.
const TAG: &str = "k1.";

/// The token that resumes after `key`.
pub(crate) fn encode(key: &str) -> String {
    let mut out = String::with_capacity(TAG.len() + 2 * key.len());
    out.push_str(TAG);
    for b in key.bytes() {
        out.push(hex_digit(b >> 4));
        out.push(hex_digit(b & 0xf));
    }
    out
}

/// The key a token resumes after; `None` when it is not one [`encode`] made for a valid key.
pub(crate) fn decode(token: &str) -> Option<EffectKey> {
    let bytes = unhex(token.strip_prefix(TAG)?.as_bytes())?;
    EffectKey::fixed(String::from_utf8(bytes).ok()?).ok()
}

fn unhex(hex: &[u8]) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    hex.chunks_exact(2)
        .map(|pair| match pair {
            [hi, lo] => Some((hex_value(*hi)? << 4) | hex_value(*lo)?),
            _ => None,
        })
        .collect()
}

fn hex_digit(nibble: u8) -> char {
    char::from(b"0123456789abcdef"[usize::from(nibble & 0xf)])
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_gives_back_the_key_it_was_made_for() {
        for key in [
            "a",
            "req-42",
            "~!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}",
            &"k".repeat(255),
        ] {
            let token = encode(key);
            assert_eq!(
                decode(&token).as_ref().map(EffectKey::as_str),
                Some(key),
                "{token}"
            );
        }
    }

    #[test]
    fn a_sealed_token_hides_its_key_and_opens_only_where_it_was_sealed() {
        let (here, elsewhere) = (Sealer::new().unwrap(), Sealer::new().unwrap());
        let token = here.seal("someone-elses-refund").unwrap();
        assert!(!token.contains(&encode("someone-elses-refund")[TAG.len()..]));
        assert_eq!(
            here.open(&token).as_ref().map(EffectKey::as_str),
            Some("someone-elses-refund")
        );
        assert!(elsewhere.open(&token).is_none());
        let mut flipped = token.clone().into_bytes();
        if let Some(last) = flipped.last_mut() {
            *last = if *last == b'0' { b'1' } else { b'0' };
        }
        assert!(here.open(&String::from_utf8(flipped).unwrap()).is_none());
        assert!(here.open("s1.").is_none() && here.open("s1.00").is_none());
        // Every sealed token is as long as every other, whatever its key.
        assert_eq!(here.seal("a").unwrap().len(), token.len());
        assert_eq!(here.seal(&"k".repeat(255)).unwrap().len(), token.len());
        // A plain token is refused where a sealed one is due, and taken where either may be.
        assert!(here.open(&encode("a")).is_none());
        assert_eq!(
            here.open_any(&encode("a")).as_ref().map(EffectKey::as_str),
            Some("a")
        );
    }

    #[test]
    fn a_token_this_server_did_not_give_is_refused() {
        for token in [
            "",
            "100",
            "k1.",
            "k1.6",
            "k1.6G",
            "k1.6A",
            "k2.61",
            "61",
            "k1.20",
            "k1.ff",
            &encode(&"k".repeat(256)),
            &encode("ключ"),
        ] {
            assert!(decode(token).is_none(), "{token:?} was accepted");
        }
    }
}
