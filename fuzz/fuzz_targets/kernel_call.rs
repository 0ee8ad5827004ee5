//! The kernel-call payload decoder (jaxlib's Triton `opaque`): zlib streams and protos built
//! from the input, the PTX entry's `.param` list read from the text inside. Each must decode or
//! give a message, never crash, panic or run away with memory.
#![no_main]

use ferrax::ops::kernel_call::Payload;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the form: a zlib stream (odd) or the bare proto.
    let Some((&form, bytes)) = data.split_first() else {
        return;
    };
    if let Ok(payload) = Payload::decode(bytes, form & 1 == 1) {
        for call in payload.candidates() {
            assert!(call.grid.iter().all(|&g| g > 0), "{call:?}");
            assert!((32..=1024).contains(&call.kernel.threads_per_block), "{call:?}");
        }
    }
});
