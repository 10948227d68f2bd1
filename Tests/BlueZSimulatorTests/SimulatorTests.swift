import Testing
@testable import BlueZSimulator

@Suite struct SimulatorPlaceholderTests {
    @Test func serviceNameIsBlueZ() { #expect(BlueZSimulatorInfo.serviceName == "org.bluez") }
}
