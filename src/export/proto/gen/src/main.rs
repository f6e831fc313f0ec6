//! prost-build on the vendored onnx.proto, into the directory given as the first argument.
fn main() {
    let out = std::env::args().nth(1).expect("usage: hvtrain-onnx-gen OUT_DIR");
    let proto = concat!(env!("CARGO_MANIFEST_DIR"), "/../onnx.proto");
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    prost_build::Config::new()
        .out_dir(&out)
        .compile_protos(&[proto], &[include])
        .expect("prost-build (needs protoc: apt-get install protobuf-compiler)");
}
