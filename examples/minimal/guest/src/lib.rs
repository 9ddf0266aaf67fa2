//! The minimal example's component: implements the `minimal` world of `../wit/minimal.wit`.

/// `Guest` (the `describe-round` export) and `now_utc` (the host's import), generated from the WIT.
mod bindings {
    wit_bindgen::generate!({
        world: "minimal",
        path: "../wit",
    });
}

use bindings::{Guest, now_utc};

/// The component's export implementations.
struct Component;

impl Guest for Component {
    fn describe_round(round_id: String, request_key: String) -> String {
        let now = now_utc();
        format!("round {round_id} waits for `{request_key}` as of {now}")
    }
}

bindings::export!(Component with_types_in bindings);
