// Node 18 lacks Symbol.asyncDispose, which `await using` and the classes'
// dispose methods need.
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for('Symbol.asyncDispose');
export {};
