//! Compiles the vendored Envoy protos with `protox` (pure Rust): no system
//! `protoc` is needed to build this crate.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/envoy/service/ratelimit/v3/rls.proto",
        // Kuadrant Limitador's check and report calls (crate::grpc::kuadrant).
        "proto/kuadrant/service/ratelimit/v1/rls.proto",
        // The xDS client (crate::xds): ADS and Lyft's RateLimitConfig.
        "proto/envoy/service/discovery/v3/ads.proto",
        "proto/ratelimit/config/ratelimit/v3/rls_conf.proto",
    ];
    let descriptors = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Undecodable bytes are the client's fault: INVALID_ARGUMENT, not INTERNAL.
        .codec_path("crate::grpc::codec::StrictCodec")
        .compile_fds(descriptors)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
