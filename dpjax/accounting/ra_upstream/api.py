# Copyright the google/differential-privacy authors (repository licence: Apache-2.0).
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# Ported into dpjax from google/differential-privacy, commit 125d46c8cb4253115c545dd4d574a2d5e52ef4bd
# (pull request #414, not in the dp_accounting 0.6 release), file
# python/dp_accounting/dp_accounting/pld/random_allocation/api.py.
# Modification: the package's import paths only (dp_accounting.pld.random_allocation -> dpjax.accounting.ra_upstream).
"""Public API surface for random-allocation PLD construction."""

from __future__ import annotations

import functools

from dp_accounting.pld import privacy_loss_distribution

from dpjax.accounting.ra_upstream import core
from dpjax.accounting.ra_upstream import definitions
from dpjax.accounting.ra_upstream import distributions
from dpjax.accounting.ra_upstream import utils


def gaussian_allocation_pld(
    params: definitions.PrivacyParams,
    config: definitions.AllocationSchemeConfig,
    bound_type: definitions.BoundType = definitions.BoundType.DOMINATES,
) -> privacy_loss_distribution.PrivacyLossDistribution:
  """Compute upper/lower PLD for random-allocation with the Gaussian mechanism.

  Args:
      params: Privacy parameters describing noise scale, number of steps,
          and optional delta/epsilon query target.
      config: Discretization and convolution configuration.
      bound_type: Whether to compute a dominating or dominated discretized
          bound.

  Returns:
      A ``dp_accounting`` ``PrivacyLossDistribution`` for both privacy
      directions.

  """
  # Input validation
  utils.validate_privacy_params(params)
  utils.validate_allocation_scheme_config(config)
  utils.validate_bound_type(bound_type)

  compute_base_pld_remove = functools.partial(
      core.gaussian_allocation_pld_core,
      direction=definitions.Direction.REMOVE,
      sigma=params.sigma,
  )
  compute_base_pld_add = functools.partial(
      core.gaussian_allocation_pld_core,
      direction=definitions.Direction.ADD,
      sigma=params.sigma,
  )
  return core.allocation_full_pld(
      compute_base_pld_remove=compute_base_pld_remove,
      compute_base_pld_add=compute_base_pld_add,
      num_steps=params.num_steps,
      num_selected=params.num_selected,
      num_epochs=params.num_epochs,
      loss_discretization=config.value_discretization_interval,
      tail_truncation=config.tail_truncation,
      bound_type=bound_type,
  )


def general_allocation_pld(
    num_steps: int,
    num_selected: int,
    num_epochs: int,
    remove_realization: distributions.PLDRealization,
    add_realization: distributions.PLDRealization,
    config: definitions.AllocationSchemeConfig,
    bound_type: definitions.BoundType = definitions.BoundType.DOMINATES,
) -> privacy_loss_distribution.PrivacyLossDistribution:
  """Build a random-allocation PLD from explicit PLD realizations.

  Args:
      num_steps: Total number of random-allocation steps.
      num_selected: Number of selections per epoch.
      num_epochs: Number of epochs.
      remove_realization: Explicit remove-direction PLD realization.
      add_realization: Explicit add-direction PLD realization.
      config: Discretization and convolution configuration.
      bound_type: Whether to compute a dominating or dominated discretized
          bound.

  Returns:
      A ``dp_accounting`` ``PrivacyLossDistribution`` for the composed
      realization.

  Notes:
      The delivery package always uses the geometric convolution path.

  """
  # Input validation
  utils.validate_allocation_params(num_steps, num_selected, num_epochs)
  if not isinstance(remove_realization, distributions.PLDRealization):
    raise TypeError(
        "remove_realization must be PLDRealization, got "
        f"{type(remove_realization)}"
    )
  if not isinstance(add_realization, distributions.PLDRealization):
    raise TypeError(
        f"add_realization must be PLDRealization, got {type(add_realization)}"
    )
  utils.validate_allocation_scheme_config(config)
  utils.validate_bound_type(bound_type)

  compute_base_pld_remove = functools.partial(
      core.geometric_allocation_pld_base_remove,
      base_distributions_creation=functools.partial(
          core.realization_remove_base_distributions,
          realization=remove_realization,
      ),
  )
  compute_base_pld_add = functools.partial(
      core.geometric_allocation_pld_base_add,
      base_distributions_creation=functools.partial(
          core.realization_add_base_distribution,
          realization=add_realization,
      ),
  )
  return core.allocation_full_pld(
      compute_base_pld_remove=compute_base_pld_remove,
      compute_base_pld_add=compute_base_pld_add,
      num_steps=num_steps,
      num_selected=num_selected,
      num_epochs=num_epochs,
      loss_discretization=config.value_discretization_interval,
      tail_truncation=config.tail_truncation,
      bound_type=bound_type,
  )
