// Document structure of packed samples (Megatron's
// get_ltor_masks_and_position_ids): a sample is documents packed back to
// back, each ending in the eod token, so the boundaries are read off the
// tokens themselves. Document j of a row starts right after the j-th eod.
//
//   --reset-attention-mask  seg_start[t] = first token of t's document; the
//                           attention kernel lets query t see keys
//                           [seg_start[t], t] only (no T x T mask is built)
//   --reset-position-ids    positions[t] = t - seg_start[t]: positions
//                           restart at 0 in each document
//   --eod-mask-loss         no loss where the input token is eod
//                           (targets[t] = -1, which the loss ignores)
//
// The eod token itself belongs to the document it ends. All arrays are
// [B, T]; a null output is not written.
#pragma once

#include <cstdint>

namespace claw::data {

struct PackingOptions {
  bool reset_position_ids = false;    // --reset-position-ids
  bool reset_attention_mask = false;  // --reset-attention-mask
  bool eod_mask_loss = false;         // --eod-mask-loss
  int32_t eod = -1;                   // the eod token id (needed by all three)
  bool any() const { return reset_position_ids || reset_attention_mask || eod_mask_loss; }
};

// Writes seg_start (when reset_attention_mask) and positions (when
// reset_position_ids) and masks targets (when eod_mask_loss) for a batch of
// B rows of T tokens.
void apply_packing(const PackingOptions& o, const int32_t* tokens, int64_t B, int64_t T, int32_t* seg_start,
                   int32_t* positions, int32_t* targets);

}  // namespace claw::data
