-- Written by tests/golden/make_grad_scaler.py (torch 2.15.0+cu132); do not edit.
return {init_scale=8, lr=0.125, growth_interval=2, base={0.5, -0.25, 1, 2}, steps={
  {scale=8.0, tracker=1, p={dtype="float32", shape={4}, values={0.9375, 2.03125, 2.875, 3.75}}},
  {scale=16.0, tracker=0, p={dtype="float32", shape={4}, values={0.8125, 2.09375, 2.625, 3.25}}},
  {scale=8.0, tracker=0, p={dtype="float32", shape={4}, values={0.8125, 2.09375, 2.625, 3.25}}},
  {scale=8.0, tracker=1, p={dtype="float32", shape={4}, values={0.5625, 2.21875, 2.125, 2.25}}},
  {scale=16.0, tracker=0, p={dtype="float32", shape={4}, values={0.25, 2.375, 1.5, 1}}},
  {scale=8.0, tracker=0, p={dtype="float32", shape={4}, values={0.25, 2.375, 1.5, 1}}},
  {scale=8.0, tracker=1, p={dtype="float32", shape={4}, values={-0.1875, 2.59375, 0.625, -0.75}}},
  {scale=16.0, tracker=0, p={dtype="float32", shape={4}, values={-0.6875, 2.84375, -0.375, -2.75}}},
  {scale=16.0, tracker=1, p={dtype="float32", shape={4}, values={-1.25, 3.125, -1.5, -5}}}
}}
