//! The `prepared-round` resource: a round's requests kept inside the component with their
//! compiled validators, so that each validation carries only the answer.

use super::responses;
use crate::errors::Result;
use crate::m3::managed_input::types::{
    ElicitationRequest, ElicitationResponse, ManagedInputError, PendingRound,
};
use crate::schema::{self, FormCheck};
use std::cell::RefCell;
use std::rc::Rc;

/// A round's requests and, per request, its compiled validator once a form answer needed it.
pub struct PreparedRound {
    requests: Vec<(String, ElicitationRequest)>,
    validators: RefCell<Vec<Option<Rc<FormCheck>>>>,
}

impl PreparedRound {
    /// Keeps `round`'s requests (its schemas are checked and compiled when first used, so a
    /// schema's error comes from the validation that needs it, as with `validate-responses`).
    pub fn new(round: PendingRound) -> Self {
        let count = round.requests.len();
        Self {
            requests: round.requests,
            validators: RefCell::new(vec![None; count]),
        }
    }

    /// `validate-responses` against this round.
    pub fn validate_responses(
        &self,
        text: &str,
    ) -> std::result::Result<Vec<(String, ElicitationResponse)>, ManagedInputError> {
        let mut validators = self.validators.borrow_mut();
        responses::validate_responses_with(&self.requests, text, &mut |index, schema_text| {
            compiled(&mut validators[index], schema_text)
        })
    }
}

/// The validator in `slot`, compiled (through the instance's cache) and kept there on first use.
fn compiled(slot: &mut Option<Rc<FormCheck>>, schema_text: &str) -> Result<Rc<FormCheck>> {
    if let Some(check) = slot {
        return Ok(check.clone());
    }
    let check = schema::validator_for(schema_text)?;
    *slot = Some(check.clone());
    Ok(check)
}
