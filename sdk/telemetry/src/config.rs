//! Whether to export, read from OpenTelemetry's standard variables. A function of the variables
//! alone, so every rule is tested without touching the process's environment. Export is off
//! unless an endpoint is named: a worker started without a collector must not spend its time
//! retrying one on `localhost:4317`.

use crate::TelemetryError;

/// What the variables ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Traces {
    /// No export, and why (shown at start-up in the log).
    Off(&'static str),
    /// OTLP over gRPC to the endpoint the exporter reads from the same variables.
    Otlp {
        /// `service.name` on every span: `OTEL_SERVICE_NAME`, else the binary's own name.
        service: String,
        /// The endpoint, as named.
        endpoint: String,
    },
}

/// The variables this reads (the exporter itself also reads `OTEL_EXPORTER_OTLP_HEADERS`,
/// `…_TIMEOUT`, `…_COMPRESSION` and their `…_TRACES_…` forms; the batch processor `OTEL_BSP_*`).
pub(crate) const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
pub(crate) const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
const EXPORTER: &str = "OTEL_TRACES_EXPORTER";
const DISABLED: &str = "OTEL_SDK_DISABLED";
const COMPRESSION: &str = "OTEL_EXPORTER_OTLP_COMPRESSION";
const TRACES_COMPRESSION: &str = "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION";
const SERVICE: &str = "OTEL_SERVICE_NAME";

/// Decide from `var` (a lookup of the environment; an empty value counts as unset, as the
/// OpenTelemetry specification says) with `service` as the default service name.
pub(crate) fn traces(
    var: &dyn Fn(&str) -> Option<String>,
    service: &str,
) -> Result<Traces, TelemetryError> {
    let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    if var(DISABLED).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(Traces::Off("OTEL_SDK_DISABLED=true"));
    }
    match var(EXPORTER) {
        None => {}
        Some(v) if v.trim() == "otlp" => {}
        Some(v) if v.trim() == "none" => return Ok(Traces::Off("OTEL_TRACES_EXPORTER=none")),
        Some(v) => return Err(TelemetryError::UnsupportedExporter(v)),
    }
    let Some((endpoint_var, endpoint)) = [TRACES_ENDPOINT, ENDPOINT]
        .into_iter()
        .find_map(|name| var(name).map(|v| (name, v)))
    else {
        return Ok(Traces::Off(
            "no OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ));
    };
    if let Some((name, value)) = [TRACES_PROTOCOL, PROTOCOL]
        .into_iter()
        .find_map(|name| var(name).map(|v| (name, v)))
        && value.trim() != "grpc"
    {
        return Err(TelemetryError::UnsupportedProtocol { var: name, value });
    }
    if let Some((name, value)) = [TRACES_COMPRESSION, COMPRESSION]
        .into_iter()
        .find_map(|name| var(name).map(|v| (name, v)))
        && value.trim() != "none"
    {
        return Err(TelemetryError::UnsupportedCompression { var: name, value });
    }
    if !endpoint.starts_with("http://") {
        return Err(TelemetryError::Endpoint {
            var: endpoint_var,
            value: endpoint,
        });
    }
    Ok(Traces::Otlp {
        service: var(SERVICE).unwrap_or_else(|| service.to_owned()),
        endpoint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Traces, TelemetryError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        traces(
            &move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
            "refund-worker",
        )
    }

    #[test]
    fn export_is_off_unless_an_endpoint_is_named() {
        assert!(matches!(with(&[]), Ok(Traces::Off(_))));
        assert!(matches!(with(&[(ENDPOINT, " ")]), Ok(Traces::Off(_))));
        assert!(matches!(
            with(&[(SERVICE, "payments"), (PROTOCOL, "grpc")]),
            Ok(Traces::Off(_))
        ));
    }

    #[test]
    fn an_endpoint_turns_export_on_under_the_binarys_name_or_otel_service_name() {
        assert_eq!(
            with(&[(ENDPOINT, "http://127.0.0.1:4317")]).unwrap(),
            Traces::Otlp {
                service: "refund-worker".into(),
                endpoint: "http://127.0.0.1:4317".into()
            }
        );
        assert_eq!(
            with(&[
                (TRACES_ENDPOINT, "http://collector:4317"),
                (ENDPOINT, "http://other:4317"),
                (SERVICE, "payments"),
                (PROTOCOL, "grpc"),
            ])
            .unwrap(),
            Traces::Otlp {
                service: "payments".into(),
                endpoint: "http://collector:4317".into()
            }
        );
    }

    #[test]
    fn disabled_or_none_wins_over_an_endpoint() {
        let on = (ENDPOINT, "http://127.0.0.1:4317");
        assert!(matches!(
            with(&[on, (DISABLED, "TRUE")]),
            Ok(Traces::Off(_))
        ));
        assert!(matches!(
            with(&[on, (EXPORTER, "none")]),
            Ok(Traces::Off(_))
        ));
        assert!(matches!(
            with(&[on, (DISABLED, "false")]),
            Ok(Traces::Otlp { .. })
        ));
    }

    #[test]
    fn what_is_not_built_in_is_named_rather_than_ignored() {
        let on = (ENDPOINT, "http://127.0.0.1:4317");
        let e = with(&[on, (EXPORTER, "zipkin")]).unwrap_err().to_string();
        assert!(e.contains("OTEL_TRACES_EXPORTER=zipkin"), "{e}");
        let e = with(&[on, (PROTOCOL, "http/protobuf")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"),
            "{e}"
        );
        let e = with(&[on, (TRACES_PROTOCOL, "http/json"), (PROTOCOL, "grpc")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), "{e}");
        let e = with(&[on, (COMPRESSION, "gzip")]).unwrap_err().to_string();
        assert!(e.contains("OTEL_EXPORTER_OTLP_COMPRESSION=gzip"), "{e}");
        assert!(matches!(
            with(&[on, (TRACES_COMPRESSION, "none")]),
            Ok(Traces::Otlp { .. })
        ));
        let e = with(&[(ENDPOINT, "https://collector:4317")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("https://collector:4317"), "{e}");
        let e = with(&[(ENDPOINT, "127.0.0.1:4317")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("http://"), "{e}");
    }
}
