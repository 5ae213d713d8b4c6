//! An exporter that keeps what it is given, for the unit tests.

use std::sync::{Arc, Mutex, PoisonError};

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

#[derive(Debug, Clone, Default)]
pub(crate) struct Memory(Arc<Mutex<Vec<SpanData>>>);

impl Memory {
    pub(crate) fn spans(&self) -> Vec<SpanData> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.spans().iter().map(|s| s.name.to_string()).collect()
    }
}

impl SpanExporter for Memory {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(batch);
        Ok(())
    }
}
