//! Handing a person's decision to the request's workflow, as the signal it waits for. The inbox
//! never grants an approval itself: the workflow checks it again and grants it in the journal,
//! so an approval the inbox passed on can still be turned down if the request moved meanwhile.

use interlock::approval::SignedApproval;
use serde::Serialize;
use temporalio_client::{Client, UntypedSignal, UntypedWorkflow, WorkflowSignalOptions};
use temporalio_common::data_converters::RawValue;
use temporalio_common::protos::temporal::api::common::v1::Payload;

/// The signal names the approval workflow listens on.
pub const APPROVE: &str = "approve";
/// See [`APPROVE`].
pub const DENY: &str = "deny";

/// Where decisions go.
#[derive(Clone)]
pub struct Temporal {
    client: Client,
}

/// A decision that could not be handed over.
#[derive(Debug, thiserror::Error)]
#[error("could not signal workflow {workflow}: {why}")]
pub struct DeliverError {
    /// The workflow.
    pub workflow: String,
    /// Why.
    pub why: String,
}

fn json_payload(value: &impl Serialize) -> Result<RawValue, String> {
    let data = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    let mut payload = Payload {
        data,
        ..Payload::default()
    };
    payload
        .metadata
        .insert("encoding".into(), b"json/plain".to_vec());
    Ok(RawValue::new(vec![payload]))
}

impl Temporal {
    /// Deliver through `client` (the `default` namespace it was made for).
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    async fn signal(
        &self,
        workflow: &str,
        name: &str,
        value: &impl Serialize,
    ) -> Result<(), DeliverError> {
        let err = |why: String| DeliverError {
            workflow: workflow.to_owned(),
            why,
        };
        let input = json_payload(value).map_err(err)?;
        self.client
            .get_workflow_handle::<UntypedWorkflow>(workflow)
            .signal(
                UntypedSignal::<UntypedWorkflow>::new(name),
                input,
                WorkflowSignalOptions::default(),
            )
            .await
            .map_err(|e| err(e.to_string()))
    }

    /// Send `approval` to `workflow`.
    pub async fn approve(
        &self,
        workflow: &str,
        approval: &SignedApproval,
    ) -> Result<(), DeliverError> {
        self.signal(workflow, APPROVE, approval).await
    }

    /// Tell `workflow` that `approver` declines `request`, and why.
    pub async fn deny(
        &self,
        workflow: &str,
        request: &str,
        approver: &str,
        reason: &str,
    ) -> Result<(), DeliverError> {
        self.signal(
            workflow,
            DENY,
            &serde_json::json!({ "request": request, "approver": approver, "reason": reason }),
        )
        .await
    }
}
