//! Checks the `#[repr(C)]` mirror in `ferrax::ffi::sys` against the real `xla/ffi/api/c_api.h`
//! shipped with the installed jaxlib: a C program generated from the lists below prints what the
//! C compiler says (sizes, alignments, offsets, `*_STRUCT_SIZE`, enum values) and every number
//! is compared with the Rust side. A wrong offset here would be silent memory corruption at run
//! time, so the check is done by the compiler rather than by hand-copied numbers.

use ferrax::ffi::sys;
use ferrax::ffi::{DataType, ErrorCode};
use std::fmt;
use std::io::Write;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// One number known to both sides: `c_expr` is evaluated by the C compiler with the header.
struct Expect {
    rust_expr: String,
    c_expr: String,
    rust: i64,
}

#[derive(Debug)]
struct Mismatch {
    rust_expr: String,
    c_expr: String,
    rust: i64,
    c: i64,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Mismatch {
            rust_expr,
            c_expr,
            rust,
            c,
        } = self;
        write!(f, "C {c_expr} = {c}, but Rust {rust_expr} = {rust}")
    }
}

#[derive(Default)]
struct Spec {
    expects: Vec<Expect>,
    /// Names of the `sys` items the expectations cover, for the completeness check.
    covered: Vec<&'static str>,
}

impl Spec {
    fn push(&mut self, rust_expr: String, c_expr: String, rust: usize) {
        let rust = i64::try_from(rust).unwrap();
        self.expects.push(Expect {
            rust_expr,
            c_expr,
            rust,
        });
    }
}

fn field_size<S, T>(_: fn(&S) -> &T) -> usize {
    size_of::<T>()
}

/// Name of a field in C: the same as in Rust unless given with `rust_name as c_name`.
macro_rules! c_field {
    ($f:ident) => {
        stringify!($f)
    };
    ($f:ident $c:ident) => {
        stringify!($c)
    };
}

/// `Struct [Rust STRUCT_SIZE const] { field, rust_field as c_field, .. }`. The `[..]` part is
/// given for the structs whose `*_STRUCT_SIZE` sys.rs defines (the header defines it for more).
macro_rules! structs {
    ($spec:ident; $($s:ident $([$size:ident])? { $($f:ident $(as $cf:ident)?),* $(,)? })*) => {$(
        // Exhaustive pattern, so a field added to sys.rs but not listed here does not compile
        // (inside a macro rustc words it as "pattern requires `..`"; the fix is to list the field).
        let _ = |v: &sys::$s| {
            let sys::$s { $($f: _),* } = v;
        };
        let s = stringify!($s);
        $spec.covered.push(s);
        $spec.push(format!("size_of::<{s}>()"), format!("sizeof({s})"), size_of::<sys::$s>());
        $spec.push(format!("align_of::<{s}>()"), format!("_Alignof({s})"), align_of::<sys::$s>());
        $(
            $spec.covered.push(stringify!($size));
            $spec.push(stringify!($size).into(), stringify!($size).into(), sys::$size);
        )?
        $(
            let (f, cf) = (stringify!($f), c_field!($f $($cf)?));
            $spec.push(
                format!("offset_of!({s}, {f})"),
                format!("offsetof({s}, {cf})"),
                offset_of!(sys::$s, $f),
            );
            $spec.push(
                format!("size of {s}.{f}"),
                format!("sizeof((({s} *)0)->{cf})"),
                field_size(|v: &sys::$s| &v.$f),
            );
        )*
    )*};
}

/// Integer constants with the same name on both sides.
macro_rules! consts {
    ($spec:ident; $($c:ident),* $(,)?) => {$(
        $spec.covered.push(stringify!($c));
        $spec.push(stringify!($c).into(), stringify!($c).into(), usize::try_from(sys::$c).unwrap());
    )*};
}

fn spec() -> Spec {
    let mut spec = Spec::default();
    structs! { spec;
        XLA_FFI_Extension_Base [XLA_FFI_Extension_Base_STRUCT_SIZE] {
            struct_size, type_ as type, next,
        }
        XLA_FFI_Api_Version [XLA_FFI_Api_Version_STRUCT_SIZE] {
            struct_size, extension_start, major_version, minor_version,
        }
        XLA_FFI_Error_Create_Args [XLA_FFI_Error_Create_Args_STRUCT_SIZE] {
            struct_size, extension_start, message, errc,
        }
        XLA_FFI_Error_GetMessage_Args [XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE] {
            struct_size, extension_start, error, message,
        }
        XLA_FFI_Error_Destroy_Args [XLA_FFI_Error_Destroy_Args_STRUCT_SIZE] {
            struct_size, extension_start, error,
        }
        XLA_FFI_Buffer [XLA_FFI_Buffer_STRUCT_SIZE] {
            struct_size, extension_start, dtype, data, rank, dims,
        }
        XLA_FFI_ByteSpan { ptr, len }
        XLA_FFI_Scalar { dtype, value }
        XLA_FFI_Array { dtype, size, data }
        XLA_FFI_TypeId { type_id }
        XLA_FFI_TypeInfo { struct_size, extension_start, deleter }
        XLA_FFI_Future_Create_Args { struct_size, extension_start, future }
        XLA_FFI_Future_SetAvailable_Args { struct_size, extension_start, future }
        XLA_FFI_Future_SetError_Args { struct_size, extension_start, future, error }
        XLA_FFI_Args [XLA_FFI_Args_STRUCT_SIZE] { struct_size, extension_start, size, types, args }
        XLA_FFI_Rets [XLA_FFI_Rets_STRUCT_SIZE] { struct_size, extension_start, size, types, rets }
        XLA_FFI_Attrs [XLA_FFI_Attrs_STRUCT_SIZE] {
            struct_size, extension_start, size, types, names, attrs,
        }
        XLA_FFI_CallFrame [XLA_FFI_CallFrame_STRUCT_SIZE] {
            struct_size, extension_start, api, ctx, stage, args, rets, attrs, future,
        }
        XLA_FFI_Handler_Bundle { instantiate, prepare, initialize, execute }
        XLA_FFI_Handler_Register_Args {
            struct_size, extension_start, name, platform, bundle, traits,
        }
        XLA_FFI_Type_Register_Args { struct_size, extension_start, name, type_id, type_info }
        XLA_FFI_ExecutionContext_Get_Args { struct_size, extension_start, ctx, type_id, data }
        XLA_FFI_State_Set_Args { struct_size, extension_start, ctx, stage, type_id, state }
        XLA_FFI_State_Get_Args { struct_size, extension_start, ctx, stage, type_id, state }
        XLA_FFI_Stream_Get_Args [XLA_FFI_Stream_Get_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, stream,
        }
        XLA_FFI_DeviceMemory_Allocate_Args [XLA_FFI_DeviceMemory_Allocate_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, size, alignment, data,
        }
        XLA_FFI_DeviceMemory_Free_Args [XLA_FFI_DeviceMemory_Free_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, size, data,
        }
        XLA_FFI_ThreadPool_Schedule_Args [XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, task, data,
        }
        XLA_FFI_ThreadPool_NumThreads_Args [XLA_FFI_ThreadPool_NumThreads_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, num_threads,
        }
        XLA_FFI_RunId_Get_Args [XLA_FFI_RunId_Get_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, run_id,
        }
        XLA_FFI_DeviceOrdinal_Get_Args [XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, device_ordinal,
        }
        XLA_FFI_Metadata [XLA_FFI_Metadata_STRUCT_SIZE] {
            struct_size, api_version, traits, state_type_id,
        }
        XLA_FFI_Metadata_Extension [XLA_FFI_Metadata_Extension_STRUCT_SIZE] {
            extension_base, metadata,
        }
        XLA_FFI_Api [XLA_FFI_Api_STRUCT_SIZE] {
            struct_size,
            extension_start,
            api_version,
            internal_api,
            XLA_FFI_Error_Create,
            XLA_FFI_Error_GetMessage,
            XLA_FFI_Error_Destroy,
            XLA_FFI_Handler_Register,
            XLA_FFI_Stream_Get,
            XLA_FFI_Type_Register,
            XLA_FFI_ExecutionContext_Get,
            XLA_FFI_State_Set,
            XLA_FFI_State_Get,
            XLA_FFI_DeviceMemory_Allocate,
            XLA_FFI_DeviceMemory_Free,
            XLA_FFI_ThreadPool_Schedule,
            XLA_FFI_ThreadPool_NumThreads,
            XLA_FFI_Future_Create,
            XLA_FFI_Future_SetAvailable,
            XLA_FFI_Future_SetError,
            XLA_FFI_RunId_Get,
            XLA_FFI_DeviceOrdinal_Get,
        }
    }
    // Incomplete types in C: only ever handled through pointers, so they have no layout.
    spec.covered.extend([
        "XLA_FFI_Error",
        "XLA_FFI_ExecutionContext",
        "XLA_FFI_Future",
        "XLA_FFI_InternalApi",
    ]);
    consts! { spec;
        XLA_FFI_API_MAJOR,
        XLA_FFI_API_MINOR,
        XLA_FFI_Extension_Metadata,
        XLA_FFI_ArgType_BUFFER,
        XLA_FFI_RetType_BUFFER,
        XLA_FFI_AttrType_ARRAY,
        XLA_FFI_AttrType_DICTIONARY,
        XLA_FFI_AttrType_SCALAR,
        XLA_FFI_AttrType_STRING,
        XLA_FFI_ExecutionStage_INSTANTIATE,
        XLA_FFI_ExecutionStage_PREPARE,
        XLA_FFI_ExecutionStage_INITIALIZE,
        XLA_FFI_ExecutionStage_EXECUTE,
        XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE,
    }
    use DataType::*;
    let dtypes = [
        (Pred, "PRED"),
        (S8, "S8"),
        (S16, "S16"),
        (S32, "S32"),
        (S64, "S64"),
        (U8, "U8"),
        (U16, "U16"),
        (U32, "U32"),
        (U64, "U64"),
        (F16, "F16"),
        (BF16, "BF16"),
        (F32, "F32"),
        (F64, "F64"),
        (C64, "C64"),
        (C128, "C128"),
        (Token, "TOKEN"),
    ];
    for (dtype, c) in dtypes {
        let raw = usize::try_from(dtype.to_raw()).unwrap();
        spec.push(
            format!("{dtype:?}.to_raw()"),
            format!("XLA_FFI_DataType_{c}"),
            raw,
        );
    }
    // Handlers report these codes to XLA as `XLA_FFI_Error_Code`.
    let codes = [
        (ErrorCode::InvalidArgument, "INVALID_ARGUMENT"),
        (ErrorCode::ResourceExhausted, "RESOURCE_EXHAUSTED"),
        (ErrorCode::FailedPrecondition, "FAILED_PRECONDITION"),
        (ErrorCode::Unimplemented, "UNIMPLEMENTED"),
        (ErrorCode::Internal, "INTERNAL"),
    ];
    for (code, c) in codes {
        let raw = usize::try_from(code as i32).unwrap();
        spec.push(
            format!("ErrorCode::{code:?}"),
            format!("XLA_FFI_Error_Code_{c}"),
            raw,
        );
    }
    spec
}

/// `pub struct` and `pub const` items of sys.rs that the spec does not cover, so that a new
/// binding cannot go unchecked.
fn uncovered(covered: &[&str]) -> Vec<String> {
    include_str!("../src/ffi/sys.rs")
        .lines()
        .filter_map(|l| {
            l.strip_prefix("pub struct ")
                .or_else(|| l.strip_prefix("pub const "))
        })
        .map(|rest| {
            rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap()
        })
        .filter(|name| !covered.contains(name))
        .map(String::from)
        .collect()
}

/// Directory holding `xla/ffi/api/c_api.h`, or `None` (after saying so) when there is none.
fn include_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let has_header = |dir: &Path| dir.join("xla/ffi/api/c_api.h").is_file();
        if let Some(dir) = std::env::var_os("FERRAX_XLA_FFI_INCLUDE").map(PathBuf::from) {
            assert!(
                has_header(&dir),
                "FERRAX_XLA_FFI_INCLUDE={dir:?} has no xla/ffi/api/c_api.h"
            );
            return Some(dir);
        }
        let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
        let pythons = std::env::var_os("FERRAX_PYTHON")
            .into_iter()
            .chain([venv.into(), "python3".into()]);
        let found = pythons
            .filter_map(|python| {
                let out = Command::new(python)
                    .args(["-c", "import jax.ffi; print(jax.ffi.include_dir())"])
                    .output()
                    .ok()?;
                out.status
                    .success()
                    .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
            })
            .find(|dir| has_header(dir));
        if found.is_none() {
            let why = "no xla/ffi/api/c_api.h: set FERRAX_XLA_FFI_INCLUDE, or FERRAX_PYTHON to a \
                       Python with jax installed";
            assert!(std::env::var_os("CI").is_none(), "{why}");
            // Straight to stderr: the test harness would capture `eprintln!` of a passing test.
            let _ = writeln!(std::io::stderr(), "\n*** c_layout skipped: {why} ***\n");
        }
        found
    })
    .as_deref()
}

/// Compiles and runs a C program that prints every `c_expr`, and returns the expectations whose
/// Rust value differs. `name` keeps concurrent tests' programs apart.
fn mismatches(include: &Path, name: &str, expects: &[Expect]) -> Vec<Mismatch> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("c_layout")
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut program = String::from("#include <stddef.h>\n#include <stdio.h>\n");
    program += "#include \"xla/ffi/api/c_api.h\"\n\nint main(void) {\n";
    for e in expects {
        program += &format!("  printf(\"%lld\\n\", (long long)({}));\n", e.c_expr);
    }
    program += "  return 0;\n}\n";
    let (source, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&source, program).unwrap();

    let cc = Command::new("cc")
        .args(["-std=c11", "-Wall", "-I"])
        .arg(include)
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("cannot run cc");
    assert!(
        cc.status.success(),
        "cc failed on {} (a name in the spec is missing from the header?):\n{}",
        source.display(),
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "{} failed", exe.display());

    let values: Vec<i64> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(
        values.len(),
        expects.len(),
        "{} printed the wrong number of values",
        exe.display()
    );
    expects
        .iter()
        .zip(values)
        .filter(|(e, c)| e.rust != *c)
        .map(|(e, c)| Mismatch {
            rust_expr: e.rust_expr.clone(),
            c_expr: e.c_expr.clone(),
            rust: e.rust,
            c,
        })
        .collect()
}

#[test]
fn sys_matches_c_api_header() {
    let Some(include) = include_dir() else { return };
    let spec = spec();
    let missing = uncovered(&spec.covered);
    assert!(
        missing.is_empty(),
        "sys.rs items not in tests/c_layout.rs: {missing:?}"
    );

    let found = mismatches(include, "sys", &spec.expects);
    let report: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert!(
        found.is_empty(),
        "{} of {} values differ between src/ffi/sys.rs and {}/xla/ffi/api/c_api.h:\n  {}",
        found.len(),
        spec.expects.len(),
        include.display(),
        report.join("\n  ")
    );
}

/// The check must be able to fail: of a right and a wrong claim (dims at 48 instead of 40 on
/// 64-bit targets), exactly the wrong one is reported, with both values.
#[test]
fn wrong_expectation_is_reported() {
    let Some(include) = include_dir() else { return };
    let dims = offset_of!(sys::XLA_FFI_Buffer, dims);
    let mut spec = Spec::default();
    spec.push(
        "right".into(),
        "offsetof(XLA_FFI_Buffer, dims)".into(),
        dims,
    );
    spec.push(
        "wrong".into(),
        "offsetof(XLA_FFI_Buffer, dims)".into(),
        dims + 8,
    );

    let found = mismatches(include, "wrong", &spec.expects);
    assert_eq!(
        found.len(),
        1,
        "expected exactly the wrong offset to be reported: {found:?}"
    );
    assert_eq!(found[0].rust_expr, "wrong");
    assert_eq!((found[0].c, found[0].rust), (dims as i64, dims as i64 + 8));
}
