//! `ListEffects` page tokens: the last key of the page just served, so the next page starts
//! strictly after it in the journal's key order. A key appended between calls shifts no page, as
//! an offset would. The token is opaque to callers (a version tag and the key in hex); one this
//! server did not give is refused rather than guessed at.

use interlock::EffectKey;

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
    let hex = token.strip_prefix(TAG)?.as_bytes();
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes = hex
        .chunks_exact(2)
        .map(|pair| match pair {
            [hi, lo] => Some((hex_value(*hi)? << 4) | hex_value(*lo)?),
            _ => None,
        })
        .collect::<Option<Vec<u8>>>()?;
    EffectKey::fixed(String::from_utf8(bytes).ok()?).ok()
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
