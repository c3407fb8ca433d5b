//! What the solver needs to know about a device: processors, GEMM latency
//! models and overhead constants.

use hetero_plan::{
    DType, GemmShape, OperandOrder, Overheads, Predictor, Processor, ProcessorModel,
};

/// A GEMM latency model for one processor and dtype.
pub trait GemmModel: Sync {
    /// Predicted latency of one GEMM, µs; `None` when the model cannot say.
    fn predict_us(&self, shape: GemmShape, order: OperandOrder) -> Option<f64>;
}

impl GemmModel for ProcessorModel {
    fn predict_us(&self, shape: GemmShape, order: OperandOrder) -> Option<f64> {
        self.model.predict_us(shape, self.dtype, order)
    }
}

/// Everything the solver asks of a device.
///
/// [`Predictor`] (a fitted predictor file) implements it; so does
/// [`crate::synthetic::Synthetic`], the simulated processors of the tests.
pub trait LatencyOracle: Sync {
    /// The device's processors.
    fn processors(&self) -> &[Processor];
    /// The latency model of a processor in a dtype.
    fn gemm_model(&self, processor: &str, dtype: DType) -> Option<&dyn GemmModel>;
    /// The dtypes a processor has latency models for.
    fn dtypes(&self, processor: &str) -> Vec<DType>;
    /// The overhead constants of a processor (fields absent when not measured).
    fn overheads(&self, processor: &str) -> Overheads;
}

impl LatencyOracle for Predictor {
    fn processors(&self) -> &[Processor] {
        &self.processors
    }

    fn gemm_model(&self, processor: &str, dtype: DType) -> Option<&dyn GemmModel> {
        self.model(processor, dtype).map(|m| m as &dyn GemmModel)
    }

    fn dtypes(&self, processor: &str) -> Vec<DType> {
        let mut d: Vec<DType> = self
            .models
            .iter()
            .filter(|m| m.processor == processor)
            .map(|m| m.dtype)
            .collect();
        d.sort();
        d.dedup();
        d
    }

    fn overheads(&self, processor: &str) -> Overheads {
        Predictor::overheads(self, processor)
    }
}
