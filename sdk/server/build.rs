//! Generates the gRPC service and messages from this package's `proto/interlock/v1/gate.proto` (needs `protoc`,
//! which `scripts/setup` installs), with a descriptor set for gRPC reflection.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let proto = root.join("interlock/v1/gate.proto");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed={}", proto.display());
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("interlock_v1_descriptor.bin"))
        .compile_protos(&[proto], &[root])?;
    Ok(())
}
