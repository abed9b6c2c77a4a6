"""What a training script imports to talk to Voda: `report` (epoch reports and resuming
from the last checkpoint), `goodput_meter` (the goodput model a batch-adaptive job
measures and reports) and `adaptive_batch` (the batch size and learning rate that model
calls for). Nothing here imports the service: a training image needs only this package."""
