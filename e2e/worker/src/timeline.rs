//! Where a refund's seconds went, in the Temporal server's own history: when the step was
//! scheduled, when its last attempt started and how many attempts it took, what ended the attempt
//! before it (a heartbeat timeout, or the gate saying the effect is in flight elsewhere), when the
//! step closed and when the workflow did. Retries leave no events of their own in a history: the
//! server writes the last attempt's start, with its number and the failure before it, when the
//! step ends; so that is all a history can say, and all this reads.

use serde::{Deserialize, Serialize};
use temporalio_common::protos::temporal::api::enums::v1::{EventType, TimeoutType};
use temporalio_common::protos::temporal::api::failure::v1::Failure;
use temporalio_common::protos::temporal::api::failure::v1::failure::FailureInfo;
use temporalio_common::protos::temporal::api::history::v1::HistoryEvent;
use temporalio_common::protos::temporal::api::history::v1::history_event::Attributes;

/// One activity's course through a workflow's history, times in ms since the Unix epoch (the
/// server's clock).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct StepTimeline {
    /// The step was scheduled (its first attempt could start).
    pub scheduled_ms: Option<i64>,
    /// Its last attempt started.
    pub last_started_ms: Option<i64>,
    /// The number of that attempt (1 when it never retried).
    pub attempts: Option<u32>,
    /// What ended the attempt before the last: `heartbeat_timeout`, another timeout by its kind,
    /// or an application failure's type name (`InterlockInFlight`); `None` on a first attempt.
    pub last_failure: Option<String>,
    /// The step ended (completed, failed, timed out or cancelled).
    pub closed_ms: Option<i64>,
    /// The workflow closed.
    pub workflow_closed_ms: Option<i64>,
}

fn ms(e: &HistoryEvent) -> Option<i64> {
    e.event_time
        .as_ref()
        .map(|t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000)
}

/// A failure named as [`StepTimeline::last_failure`] names it.
fn failure_name(f: &Failure) -> String {
    match &f.failure_info {
        Some(FailureInfo::TimeoutFailureInfo(t)) => match TimeoutType::try_from(t.timeout_type) {
            Ok(TimeoutType::Heartbeat) => "heartbeat_timeout".into(),
            Ok(TimeoutType::StartToClose) => "start_to_close_timeout".into(),
            Ok(TimeoutType::ScheduleToStart) => "schedule_to_start_timeout".into(),
            Ok(TimeoutType::ScheduleToClose) => "schedule_to_close_timeout".into(),
            _ => "timeout".into(),
        },
        Some(FailureInfo::ApplicationFailureInfo(a)) if !a.r#type.is_empty() => a.r#type.clone(),
        Some(FailureInfo::ApplicationFailureInfo(_)) => "application".into(),
        Some(FailureInfo::CanceledFailureInfo(_)) => "canceled".into(),
        _ => "other".into(),
    }
}

/// The course of the activity with id `activity_id` (its last scheduling, if the workflow
/// scheduled it more than once).
pub fn step_timeline(events: &[HistoryEvent], activity_id: &str) -> StepTimeline {
    let mut t = StepTimeline::default();
    let mut scheduled_id = None;
    for e in events {
        match &e.attributes {
            Some(Attributes::ActivityTaskScheduledEventAttributes(a))
                if a.activity_id == activity_id =>
            {
                scheduled_id = Some(e.event_id);
                t = StepTimeline {
                    scheduled_ms: ms(e),
                    workflow_closed_ms: t.workflow_closed_ms,
                    ..StepTimeline::default()
                };
            }
            Some(Attributes::ActivityTaskStartedEventAttributes(a))
                if Some(a.scheduled_event_id) == scheduled_id =>
            {
                t.last_started_ms = ms(e);
                t.attempts = u32::try_from(a.attempt).ok();
                t.last_failure = a.last_failure.as_ref().map(failure_name);
            }
            Some(Attributes::ActivityTaskCompletedEventAttributes(a))
                if Some(a.scheduled_event_id) == scheduled_id =>
            {
                t.closed_ms = ms(e);
            }
            Some(Attributes::ActivityTaskFailedEventAttributes(a))
                if Some(a.scheduled_event_id) == scheduled_id =>
            {
                t.closed_ms = ms(e);
            }
            Some(Attributes::ActivityTaskTimedOutEventAttributes(a))
                if Some(a.scheduled_event_id) == scheduled_id =>
            {
                t.closed_ms = ms(e);
            }
            Some(Attributes::ActivityTaskCanceledEventAttributes(a))
                if Some(a.scheduled_event_id) == scheduled_id =>
            {
                t.closed_ms = ms(e);
            }
            _ => {}
        }
        let closes = [
            EventType::WorkflowExecutionCompleted,
            EventType::WorkflowExecutionFailed,
            EventType::WorkflowExecutionTimedOut,
            EventType::WorkflowExecutionCanceled,
            EventType::WorkflowExecutionTerminated,
            EventType::WorkflowExecutionContinuedAsNew,
        ];
        if EventType::try_from(e.event_type).is_ok_and(|k| closes.contains(&k)) {
            t.workflow_closed_ms = ms(e);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use temporalio_common::protos::temporal::api::failure::v1::{
        ApplicationFailureInfo, TimeoutFailureInfo,
    };
    use temporalio_common::protos::temporal::api::history::v1::{
        ActivityTaskCompletedEventAttributes, ActivityTaskScheduledEventAttributes,
        ActivityTaskStartedEventAttributes, WorkflowExecutionCompletedEventAttributes,
    };

    use super::*;

    fn event(id: i64, at_ms: i64, kind: EventType, attributes: Attributes) -> HistoryEvent {
        let mut e = HistoryEvent {
            event_id: id,
            event_time: Some(Default::default()),
            event_type: kind as i32,
            attributes: Some(attributes),
            ..HistoryEvent::default()
        };
        if let Some(t) = e.event_time.as_mut() {
            t.seconds = at_ms / 1000;
            t.nanos = i32::try_from((at_ms % 1000) * 1_000_000).unwrap();
        }
        e
    }

    fn scheduled(id: i64, at: i64, activity: &str) -> HistoryEvent {
        event(
            id,
            at,
            EventType::ActivityTaskScheduled,
            Attributes::ActivityTaskScheduledEventAttributes(
                ActivityTaskScheduledEventAttributes {
                    activity_id: activity.into(),
                    ..Default::default()
                },
            ),
        )
    }

    fn started(id: i64, at: i64, of: i64, attempt: i32, before: Option<Failure>) -> HistoryEvent {
        event(
            id,
            at,
            EventType::ActivityTaskStarted,
            Attributes::ActivityTaskStartedEventAttributes(ActivityTaskStartedEventAttributes {
                scheduled_event_id: of,
                attempt,
                last_failure: before,
                ..Default::default()
            }),
        )
    }

    fn completed(id: i64, at: i64, of: i64) -> HistoryEvent {
        event(
            id,
            at,
            EventType::ActivityTaskCompleted,
            Attributes::ActivityTaskCompletedEventAttributes(
                ActivityTaskCompletedEventAttributes {
                    scheduled_event_id: of,
                    ..Default::default()
                },
            ),
        )
    }

    fn workflow_done(id: i64, at: i64) -> HistoryEvent {
        event(
            id,
            at,
            EventType::WorkflowExecutionCompleted,
            Attributes::WorkflowExecutionCompletedEventAttributes(
                WorkflowExecutionCompletedEventAttributes::default(),
            ),
        )
    }

    fn timed_out(kind: TimeoutType) -> Failure {
        Failure {
            failure_info: Some(FailureInfo::TimeoutFailureInfo(TimeoutFailureInfo {
                timeout_type: kind as i32,
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn the_refund_steps_last_attempt_is_read_with_the_failure_before_it_and_other_steps_are_ignored()
     {
        let events = [
            scheduled(5, 1_000, "decide"),
            started(6, 1_010, 5, 1, None),
            completed(7, 1_020, 5),
            scheduled(11, 1_100, "refund"),
            started(12, 4_900, 11, 2, Some(timed_out(TimeoutType::Heartbeat))),
            completed(13, 5_300, 11),
            workflow_done(17, 5_350),
        ];
        assert_eq!(
            step_timeline(&events, "refund"),
            StepTimeline {
                scheduled_ms: Some(1_100),
                last_started_ms: Some(4_900),
                attempts: Some(2),
                last_failure: Some("heartbeat_timeout".into()),
                closed_ms: Some(5_300),
                workflow_closed_ms: Some(5_350),
            }
        );
    }

    #[test]
    fn an_application_failure_before_the_last_attempt_is_named_by_its_type() {
        let in_flight = Failure {
            failure_info: Some(FailureInfo::ApplicationFailureInfo(
                ApplicationFailureInfo {
                    r#type: "InterlockInFlight".into(),
                    ..Default::default()
                },
            )),
            ..Default::default()
        };
        let events = [
            scheduled(11, 1_100, "refund"),
            started(12, 9_900, 11, 9, Some(in_flight)),
        ];
        let t = step_timeline(&events, "refund");
        assert_eq!(t.last_failure.as_deref(), Some("InterlockInFlight"));
        assert_eq!(t.attempts, Some(9));
        assert_eq!(t.closed_ms, None, "the step has not ended in this history");
    }

    #[test]
    fn a_step_the_workflow_never_scheduled_has_an_empty_timeline() {
        let events = [scheduled(5, 1_000, "decide"), workflow_done(9, 2_000)];
        let t = step_timeline(&events, "refund");
        assert_eq!(t.scheduled_ms, None);
        assert_eq!(t.workflow_closed_ms, Some(2_000));
    }
}
