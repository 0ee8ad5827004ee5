use super::proto::{self, ParameterValue as V};
use super::*;

const PTX: &str = "\
.version 8.4
.target sm_90
.address_size 64
.visible .entry axpy(
\t.param .u64 .ptr .global .align 1 axpy_param_0,
\t.param .u64 .ptr .global .align 1 axpy_param_1,
\t.param .f32 axpy_param_2,
\t.param .u32 axpy_param_3,
\t.param .u64 .ptr .global .align 1 axpy_param_4,
\t.param .u64 .ptr .global .align 1 axpy_param_5
)
{
\tret;
}
";

fn param(value: V) -> proto::Parameter {
    proto::Parameter { value: Some(value) }
}

fn array(bytes_to_zero: u64) -> proto::Parameter {
    param(V::Array(proto::ArrayParameter {
        bytes_to_zero,
        ptr_divisibility: 16,
    }))
}

fn axpy_call(grid: [u32; 3], params: Vec<proto::Parameter>) -> proto::TritonKernelCall {
    proto::TritonKernelCall {
        kernel: Some(proto::TritonKernel {
            kernel_name: "axpy".into(),
            num_warps: 4,
            num_ctas: Some(1),
            shared_mem_bytes: 0,
            ptx: PTX.into(),
            ttir: String::new(),
            compute_capability: 90,
            module_image: None,
            global_scratch_size: None,
            global_scratch_align: None,
        }),
        grid_0: grid[0],
        grid_1: grid[1],
        grid_2: grid[2],
        parameters: params,
    }
}

fn axpy_params() -> Vec<proto::Parameter> {
    vec![array(0), array(64), param(V::F32(2.5)), param(V::U32(1000))]
}

fn encode(value: proto::AnyCall) -> Vec<u8> {
    let any = proto::TritonAnyKernelCall {
        value: Some(value),
        metadata: b"meta".to_vec(),
        name: "my_call".into(),
    };
    miniz_oxide::deflate::compress_to_vec_zlib(&any.encode_to_vec(), 6)
}

fn decode_one(call: proto::TritonKernelCall) -> Result<Payload, String> {
    Payload::decode(&encode(proto::AnyCall::KernelCall(call)), true)
}

#[test]
fn decodes_a_plain_call() {
    let payload = decode_one(axpy_call([8, 1, 1], axpy_params())).unwrap();
    assert_eq!(payload.name, "my_call");
    assert_eq!(payload.metadata, b"meta");
    assert_eq!(payload.buffers(), 2);
    let Calls::One(call) = &payload.calls else {
        panic!("expected one call");
    };
    assert_eq!(call.grid, [8, 1, 1]);
    assert_eq!(call.kernel.threads_per_block, 128);
    assert_eq!(call.kernel.code, Code::Ptx(PTX.into()));
    assert_eq!(
        call.params,
        [
            Param::Array {
                bytes_to_zero: 0,
                divisibility: 16
            },
            Param::Array {
                bytes_to_zero: 64,
                divisibility: 16
            },
            Param::Scalar(Scalar::F32(2.5)),
            Param::Scalar(Scalar::U32(1000)),
        ]
    );
    assert_eq!(call.kernel.entry_params.as_ref().unwrap().len(), 6);
}

#[test]
fn decodes_an_autotuned_call() {
    let tuned = proto::TritonAutotunedKernelCall {
        name: "tuned".into(),
        configs: [1u32, 2]
            .map(|g| proto::AutotuneConfig {
                kernel_call: Some(axpy_call([g, 1, 1], axpy_params())),
                description: format!("grid {g}"),
            })
            .into(),
        input_output_aliases: vec![proto::InputOutputAlias {
            input_buffer_idx: 0,
            output_buffer_idx: 1,
            buffer_size_bytes: 4000,
        }],
    };
    let payload = Payload::decode(&encode(proto::AnyCall::Autotuned(tuned.clone())), true).unwrap();
    let Calls::Autotuned {
        name,
        configs,
        aliases,
    } = &payload.calls
    else {
        panic!("expected an autotuned call");
    };
    assert_eq!(name, "tuned");
    assert_eq!(configs.len(), 2);
    assert_eq!(configs[1].call.grid, [2, 1, 1]);
    assert_eq!(configs[1].description, "grid 2");
    assert_eq!(
        aliases,
        &[Alias {
            input: 0,
            output: 1,
            bytes: 4000
        }]
    );

    let mut bad = tuned.clone();
    bad.configs[1].kernel_call.as_mut().unwrap().grid_0 = 0;
    let error = Payload::decode(&encode(proto::AnyCall::Autotuned(bad)), true).unwrap_err();
    assert!(
        error.starts_with("autotuned call \"tuned\", configuration \"grid 2\": kernel axpy: grid"),
        "{error}"
    );

    let mut bad = tuned;
    bad.input_output_aliases[0].output_buffer_idx = 2;
    let error = Payload::decode(&encode(proto::AnyCall::Autotuned(bad)), true).unwrap_err();
    assert!(
        error.contains("alias 0 -> 2 outside its 2 buffers"),
        "{error}"
    );
}

#[test]
fn a_call_that_does_not_match_its_entry_is_an_error_naming_the_kernel() {
    // A scalar of the wrong width, a missing parameter, one too many.
    let mut wide = axpy_params();
    wide[3] = param(V::U64(1000));
    let mut short = axpy_params();
    short.pop();
    let mut long = axpy_params();
    long.push(param(V::I32(1)));
    long.push(param(V::I32(1)));
    long.push(param(V::I32(1)));
    for params in [wide, short, long] {
        let error = decode_one(axpy_call([1, 1, 1], params)).unwrap_err();
        assert!(
            error.starts_with("kernel axpy: the call's parameters"),
            "{error}"
        );
    }
    // Without the two trailing pointers the entry still fits (older kernels).
    let ptx = PTX.replace(
        ",\n\t.param .u64 .ptr .global .align 1 axpy_param_4,\n\t.param .u64 .ptr .global .align 1 axpy_param_5",
        "",
    );
    let mut call = axpy_call([1, 1, 1], axpy_params());
    call.kernel.as_mut().unwrap().ptx = ptx;
    assert_eq!(decode_one(call).unwrap().buffers(), 2);
}

/// An edit of a good call.
type Edit<'a> = &'a dyn Fn(&mut proto::TritonKernelCall);

#[test]
fn bad_kernels_and_grids_are_errors_naming_the_kernel() {
    let with = |edit: Edit| {
        let mut call = axpy_call([4, 1, 1], axpy_params());
        edit(&mut call);
        decode_one(call).unwrap_err()
    };
    let cases: [(Edit, &str); 7] = [
        (
            &|c| c.kernel.as_mut().unwrap().num_ctas = Some(0),
            "kernel axpy: num_ctas = 0",
        ),
        (&|c| c.grid_1 = 0, "kernel axpy: grid [4, 0, 1]"),
        (&|c| c.grid_2 = 65536, "kernel axpy: grid [4, 1, 65536]"),
        (
            &|c| {
                c.grid_0 = 1 << 30;
                c.kernel.as_mut().unwrap().num_ctas = Some(2);
            },
            "(2 blocks per cluster)",
        ),
        (
            &|c| c.kernel.as_mut().unwrap().num_warps = 33,
            "kernel axpy: num_warps = 33",
        ),
        (
            &|c| c.kernel.as_mut().unwrap().kernel_name = "saxpy".into(),
            "kernel saxpy: the PTX defines no entry of that name",
        ),
        (
            &|c| c.kernel.as_mut().unwrap().ptx.clear(),
            "kernel axpy: neither PTX nor a compiled module",
        ),
    ];
    for (edit, expected) in cases {
        let error = with(edit);
        assert!(error.contains(expected), "{error} (expected {expected})");
    }
    let error = with(&|c| c.parameters[1] = proto::Parameter { value: None });
    assert!(error.contains("parameter 1 has no value"), "{error}");
}

#[test]
fn a_cubin_is_taken_without_reading_its_parameters() {
    let mut call = axpy_call([1, 1, 1], axpy_params());
    let kernel = call.kernel.as_mut().unwrap();
    kernel.ptx.clear();
    kernel.module_image = Some(proto::ModuleImage {
        object_file: vec![0x7f, b'E', b'L', b'F'],
        kernel_name: "axpy".into(),
        shared_mem_bytes: 0,
    });
    let payload = decode_one(call).unwrap();
    let call = payload.candidates()[0];
    assert_eq!(call.kernel.code, Code::Cubin(vec![0x7f, b'E', b'L', b'F']));
    assert!(call.kernel.entry_params.is_none());
}

#[test]
fn malformed_payloads_are_errors() {
    let compressed = encode(proto::AnyCall::KernelCall(axpy_call(
        [1, 1, 1],
        axpy_params(),
    )));
    for bytes in [&b""[..], b"not zlib", &compressed[..compressed.len() / 2]] {
        let error = Payload::decode(bytes, true).unwrap_err();
        assert!(
            error.starts_with("opaque: expected a zlib-compressed"),
            "{error}"
        );
    }
    let error = Payload::decode(&[0xff, 0xff, 0xff], false).unwrap_err();
    assert!(
        error.starts_with("opaque: not a TritonAnyKernelCall proto"),
        "{error}"
    );
    let empty = proto::TritonAnyKernelCall::default().encode_to_vec();
    let error = Payload::decode(&empty, false).unwrap_err();
    assert_eq!(error, "opaque: the proto holds no kernel call");
}
