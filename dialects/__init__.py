"""What falcon adds to the IR: discardable ``falcon.*`` attributes the passes
read and write. IREE only ever sees upstream dialects after the rewrite.

* ``falcon.plan`` (:mod:`.plan`): the plan a user (or a decision pass) pins
  on a contraction; lcma-rewrite follows and removes it.
* ``falcon.combine`` (:mod:`.combine`): lcma-rewrite's tag on its combine
  ops; falcon-tiles turns it into a CUDA tile choice.
"""
