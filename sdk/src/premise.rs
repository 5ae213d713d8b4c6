//! Premise readers: code that reads the facts a decision stood on, at decision time and again
//! before every send. A reader is given the effect's key so it can leave the effect's own result
//! out (a refund must not count itself among "refunds by others").

use serde_json::Value;

use crate::core::{Premises, Repair};
use crate::effect::EffectKey;

/// Why premises could not be read. Either way nothing is sent (fail closed).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PremiseError {
    /// The source could not be reached; trying again later may work.
    #[error("premise source unavailable: {0}")]
    Unavailable(String),
    /// The source answered something that cannot be a fact.
    #[error("premise source answered nonsense: {0}")]
    Invalid(String),
}

/// Reads premises for effects of one kind.
pub trait PremiseReader: Send + Sync {
    /// Read every premise this reader knows, excluding the effect `key`'s own result.
    fn read(&self, key: &EffectKey, payload: &Value) -> Result<Premises, PremiseError>;

    /// Suggest new decisions when premises moved. Never applied automatically.
    fn repairs(&self, _payload: &Value, _now: &Premises) -> Vec<Repair> {
        Vec::new()
    }
}

/// A reader for effects that stand on no facts.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoPremises;

impl PremiseReader for NoPremises {
    fn read(&self, _key: &EffectKey, _payload: &Value) -> Result<Premises, PremiseError> {
        Ok(Premises::new())
    }
}

/// A reader built from a closure.
pub struct FnPremises<F>(pub F);

impl<F> PremiseReader for FnPremises<F>
where
    F: Fn(&EffectKey, &Value) -> Result<Premises, PremiseError> + Send + Sync,
{
    fn read(&self, key: &EffectKey, payload: &Value) -> Result<Premises, PremiseError> {
        (self.0)(key, payload)
    }
}
