package testnet

import "errors"

// Serve starts a World for a program that is not a test, such as a
// benchmark that runs its measurements through MainFunc: run calls Serve
// in the namespace, and stop stops the World. dir is where CAFile goes;
// it must exist, and stays when the World stops.
//
// Serve fails where Start would skip (not Available: MainFunc was not
// called, or there was no namespace), and when another World runs in
// this process: the addresses are fixed, so it does not wait for it.
func Serve(dir string) (w *World, stop func(), err error) {
	if !available {
		return nil, nil, errors.New("testnet: " + reason)
	}
	select {
	case worldSlot <- struct{}{}:
	default:
		return nil, nil, errors.New("testnet: another World runs in this process")
	}
	w = newWorld()
	stop = func() {
		w.stop()
		<-worldSlot
	}
	if err := w.start(dir); err != nil {
		stop()
		return nil, nil, err
	}
	return w, stop, nil
}
